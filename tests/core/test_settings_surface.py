"""What an operator can set, frozen: every ``CITEWISE_*`` variable and ``[settings]`` key with its
default, the precedence (environment over the config file over defaults), the config file's
tables and the errors a bad value gets.

The table below was generated from the settings as they were before they were split per layer
(one flat class), and is kept by hand since: a setting added, renamed or given another default
changes it here on purpose. The settings are read back by the name an operator knows them by,
wherever in the settings object they live (``_by_name``), so the test holds for any layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from citewise.api.settings import Settings
from citewise.errors import ConfigError

HERE = Path("<the config file's folder>")  # replaced by the real folder in each test

# (name, default, value in [settings], what it reads as, value in the environment, what it reads as)
SURFACE: list[tuple[str, Any, Any, Any, str, Any]] = [
    ("data_dir", Path("data"), "toml-data", HERE / "toml-data", "/nonexistent/env-data",
     Path("/nonexistent/env-data")),
    ("min_free_mb", 100, 101, 101, "102", 102),
    ("database_url", None, "postgresql://toml@db/citewise", "postgresql://toml@db/citewise",
     "postgresql://env@db/citewise", "postgresql://env@db/citewise"),
    ("database_pool_size", 10, 11, 11, "12", 12),
    ("database_timeout", 5.0, 6.5, 6.5, "7", 7.0),
    ("vector_store", "qdrant", "pgvector", "pgvector", "qdrant", "qdrant"),
    ("log_level", "INFO", "WARNING", "WARNING", "ERROR", "ERROR"),
    ("log_format", "text", "json", "json", "text", "text"),
    ("schedule_ingest", None, "30 2 * * *", "30 2 * * *", "@daily", "@daily"),
    ("schedule_timezone", "UTC", "Europe/Paris", "Europe/Paris", "America/New_York",
     "America/New_York"),
    ("schedule_catch_up", True, False, False, "true", True),
    ("serve_runs_ingest", True, False, False, "true", True),
    ("ingest_yield", 3.0, 4.5, 4.5, "0", 0.0),
    ("qdrant_url", None, "http://toml-qdrant:6333", "http://toml-qdrant:6333",
     "http://env-qdrant:6333", "http://env-qdrant:6333"),
    ("qdrant_api_key", None, "toml-qdrant_api_key", "toml-qdrant_api_key",
     "env-qdrant_api_key", "env-qdrant_api_key"),
    ("qdrant_collection", "citewise", "toml-qdrant_collection", "toml-qdrant_collection",
     "env-qdrant_collection", "env-qdrant_collection"),
    ("qdrant_timeout", 10.0, 11.5, 11.5, "12.5", 12.5),
    ("edge_hnsw_from", 100_000, 1000, 1000, "0", 0),
    ("edge_hnsw_m", 16, 24, 24, "32", 32),
    ("edge_hnsw_ef_construct", 100, 150, 150, "200", 200),
    ("edge_hnsw_ef", 1024, 64, 64, "256", 256),
    ("edge_quantization", "int8", "none", "none", "int8", "int8"),
    ("blob_store", "local", "s3", "s3", "local", "local"),
    ("s3_bucket", None, "toml-s3_bucket", "toml-s3_bucket", "env-s3_bucket", "env-s3_bucket"),
    ("s3_prefix", "citewise/", "toml-s3_prefix", "toml-s3_prefix", "env-s3_prefix",
     "env-s3_prefix"),
    ("s3_endpoint_url", None, "toml-s3_endpoint_url", "toml-s3_endpoint_url",
     "env-s3_endpoint_url", "env-s3_endpoint_url"),
    ("s3_region", None, "toml-s3_region", "toml-s3_region", "env-s3_region", "env-s3_region"),
    ("s3_access_key_id", None, "toml-s3_access_key_id", "toml-s3_access_key_id",
     "env-s3_access_key_id", "env-s3_access_key_id"),
    ("s3_secret_access_key", None, "toml-s3_secret_access_key", "toml-s3_secret_access_key",
     "env-s3_secret_access_key", "env-s3_secret_access_key"),
    ("embedding_model_path", None, "toml-embedding_model_path",
     Path("toml-embedding_model_path"), "/nonexistent/env-embedding_model_path",
     Path("/nonexistent/env-embedding_model_path")),
    ("embedding_batch_size", 32, 33, 33, "34", 34),
    ("embedding_url", None, "toml-embedding_url", "toml-embedding_url", "env-embedding_url",
     "env-embedding_url"),
    ("embedding_model", None, "toml-embedding_model", "toml-embedding_model",
     "env-embedding_model", "env-embedding_model"),
    ("embedding_query_model", None, "toml-embedding_query_model", "toml-embedding_query_model",
     "env-embedding_query_model", "env-embedding_query_model"),
    ("embedding_api_key", None, "toml-embedding_api_key", "toml-embedding_api_key",
     "env-embedding_api_key", "env-embedding_api_key"),
    ("embedding_dim", None, 384, 384, "768", 768),
    ("embedding_timeout", 30.0, 31.5, 31.5, "32.5", 32.5),
    ("embedding_concurrency", 4, 5, 5, "6", 6),
    ("embedding_unit_precision", "auto", "float32", "float32", "bfloat16", "bfloat16"),
    ("chunk_max_tokens", 200, 201, 201, "202", 202),
    ("parse_processes", None, 2, 2, "3", 3),
    ("llm_base_url", None, "toml-llm_base_url", "toml-llm_base_url", "env-llm_base_url",
     "env-llm_base_url"),
    ("llm_model", None, "toml-llm_model", "toml-llm_model", "env-llm_model", "env-llm_model"),
    ("llm_api_key", None, "toml-llm_api_key", "toml-llm_api_key", "env-llm_api_key",
     "env-llm_api_key"),
    ("llm_timeout", 60.0, 61.5, 61.5, "62.5", 62.5),
    ("llm_input_price", 0.0, 1.5, 1.5, "2.5", 2.5),
    ("llm_output_price", 0.0, 1.5, 1.5, "2.5", 2.5),
    ("llm_deadline", 90.0, 91.5, 91.5, "92.5", 92.5),
    ("llm_max_attempts", 4, 5, 5, "6", 6),
    ("llm_breaker_failures", 5, 6, 6, "7", 7),
    ("llm_breaker_reset", 30.0, 31.5, 31.5, "32.5", 32.5),
    ("answer_cache", True, False, False, "true", True),
    ("answer_cache_threshold", 0.95, 0.96, 0.96, "0.97", 0.97),
    ("answer_cache_ttl", 86400.0, 86401.5, 86401.5, "86402.5", 86402.5),
    ("answer_cache_size", 5000, 5001, 5001, "5002", 5002),
    ("conversation_idle_hours", 168.0, 169.5, 169.5, "170.5", 170.5),
    ("conversation_max_turns", 100, 101, 101, "102", 102),
    ("slack_api_url", "https://slack.com/api/", "https://toml.slack.example/api/",
     "https://toml.slack.example/api/", "https://env.slack.example/api/",
     "https://env.slack.example/api/"),
    ("slack_state", None, "toml-slack_state", Path("toml-slack_state"),
     "/nonexistent/env-slack_state", Path("/nonexistent/env-slack_state")),
    ("sse_keepalive", 15.0, 16.5, 16.5, "17.5", 17.5),
    ("search_prefetch", 50, 51, 51, "52", 52),
    ("search_fusion", "convex", "rrf", "rrf", "convex", "convex"),
    ("search_dense_weight", 0.6, 0.7, 0.7, "0.8", 0.8),
    ("synonyms_file", None, "toml-synonyms.txt", HERE / "toml-synonyms.txt",
     "/nonexistent/env-synonyms.txt", Path("/nonexistent/env-synonyms.txt")),
    ("vocabulary_file", None, "toml-vocabulary.toml", HERE / "toml-vocabulary.toml",
     "/nonexistent/env-vocabulary.toml", Path("/nonexistent/env-vocabulary.toml")),
    ("rerank_url", None, "toml-rerank_url", "toml-rerank_url", "env-rerank_url",
     "env-rerank_url"),
    ("rerank_model", None, "toml-rerank_model", "toml-rerank_model", "env-rerank_model",
     "env-rerank_model"),
    ("rerank_api_key", None, "toml-rerank_api_key", "toml-rerank_api_key",
     "env-rerank_api_key", "env-rerank_api_key"),
    ("rerank_model_path", None, "toml-rerank_model_path", Path("toml-rerank_model_path"),
     "/nonexistent/env-rerank_model_path", Path("/nonexistent/env-rerank_model_path")),
    ("rerank_candidates", 20, 30, 30, "40", 40),
    ("rerank_timeout", 10.0, 11.5, 11.5, "12.5", 12.5),
    ("rank_model_file", None, "toml-rank-model.json", HERE / "toml-rank-model.json",
     "/nonexistent/env-rank-model.json", Path("/nonexistent/env-rank-model.json")),
    ("rank_learned", True, False, False, "true", True),
    ("answer_min_score", 0.32, 1.82, 1.82, "2.82", 2.82),
    ("host", "127.0.0.1", "toml-host", "toml-host", "env-host", "env-host"),
    ("port", 8000, 8001, 8001, "8002", 8002),
    ("require_auth", None, True, True, "false", False),
    ("insecure_trust_identity_headers", False, True, True, "false", False),
    ("access_team_domain", None, "https://toml.cloudflareaccess.com",
     "https://toml.cloudflareaccess.com", "https://env.cloudflareaccess.com",
     "https://env.cloudflareaccess.com"),
    ("access_aud", None, "toml-access_aud", "toml-access_aud", "env-access_aud",
     "env-access_aud"),
    ("access_jwks_url", None, "toml-access_jwks_url", "toml-access_jwks_url",
     "env-access_jwks_url", "env-access_jwks_url"),
    ("access_groups_claim", None, "toml-access_groups_claim", "toml-access_groups_claim",
     "env-access_groups_claim", "env-access_groups_claim"),
    ("oidc_issuer", None, "toml-oidc_issuer", "toml-oidc_issuer", "env-oidc_issuer",
     "env-oidc_issuer"),
    ("oidc_audience", None, "toml-oidc_audience", "toml-oidc_audience", "env-oidc_audience",
     "env-oidc_audience"),
    ("oidc_jwks_url", None, "toml-oidc_jwks_url", "toml-oidc_jwks_url", "env-oidc_jwks_url",
     "env-oidc_jwks_url"),
    ("oidc_jwks_file", None, "toml-oidc_jwks_file", Path("toml-oidc_jwks_file"),
     "/nonexistent/env-oidc_jwks_file", Path("/nonexistent/env-oidc_jwks_file")),
    ("oidc_user_claim", "email", "toml-oidc_user_claim", "toml-oidc_user_claim",
     "env-oidc_user_claim", "env-oidc_user_claim"),
    ("oidc_groups_claim", "groups", "toml-oidc_groups_claim", "toml-oidc_groups_claim",
     "env-oidc_groups_claim", "env-oidc_groups_claim"),
    ("jwt_leeway", 60.0, 61.0, 61.0, "62.5", 62.5),
    ("jwks_timeout", 5.0, 6.5, 6.5, "7.5", 7.5),
    ("sso_scopes", "search,answer", "search", "search", "search,answer,ingest",
     "search,answer,ingest"),
    ("admin_groups", None, "toml-admins", "toml-admins", "env-admins,ops", "env-admins,ops"),
    ("rate_search_per_minute", 120, 121, 121, "122", 122),
    ("rate_answer_per_minute", 30, 31, 31, "32", 32),
    ("rate_ingest_per_minute", 10, 11, 11, "12", 12),
    ("quota_search_per_day", 0, 1, 1, "2", 2),
    ("quota_answer_per_day", 0, 1, 1, "2", 2),
    ("quota_ingest_per_day", 0, 1, 1, "2", 2),
    ("identity_key_limits",
     "search_per_minute=1200,answer_per_minute=300,ingest_per_minute=100",
     "search_per_minute=5", "search_per_minute=5", "", ""),
    ("usage_raw_days", 7, 8, 8, "9", 9),
    ("usage_retention_days", 400, 401, 401, "402", 402),
    ("cors_origins", None, "https://toml.example", "https://toml.example",
     "https://env.example", "https://env.example"),
    ("default_readers", None, ["group:toml-readers"], ["group:toml-readers"],
     "group:env-a,user:env-b", ["group:env-a", "user:env-b"]),
    ("ingest_allowed_paths", [], ["/nonexistent/toml-a"], [Path("/nonexistent/toml-a")],
     "/nonexistent/env-a,/nonexistent/env-b",
     [Path("/nonexistent/env-a"), Path("/nonexistent/env-b")]),
    ("trusted_proxies", None, "10.0.0.1", "10.0.0.1", "10.0.0.2,10.1.0.0/16",
     "10.0.0.2,10.1.0.0/16"),
    ("max_request_bytes", 1048576, 1048577, 1048577, "1048578", 1048578),
    ("http_keep_alive", 5.0, 6.5, 6.5, "7.5", 7.5),
    ("http_header_timeout", 10.0, 11.5, 11.5, "12.5", 12.5),
    ("http_max_header_bytes", 65536, 65537, 65537, "65538", 65538),
    ("http_max_concurrency", 1000, 1001, 1001, "1002", 1002),
    ("max_asserted_groups", 256, 257, 257, "258", 258),
    ("max_group_name", 128, 200, 200, "300", 300),
]
NAMES = [row[0] for row in SURFACE]


def load(config_file: Path | None = None, **overrides: Any) -> Settings:
    return Settings.load(config_file, **overrides)


def _by_name(settings: BaseModel) -> dict[str, Any]:
    """Every value in ``settings`` by its field's name, at whatever depth it is held."""
    found: dict[str, Any] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, BaseModel):
            found.update(_by_name(value))
        else:
            found[name] = value
    return found


def _here(value: Any, folder: Path) -> Any:
    if isinstance(value, Path) and value.is_relative_to(HERE):
        return folder / value.relative_to(HERE)
    return value


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


@pytest.fixture
def no_settings(monkeypatch, tmp_path):
    """No CITEWISE_* variable and no ./citewise.toml: only what a test sets applies."""
    import os

    for key in list(os.environ):
        if key.upper().startswith("CITEWISE_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _config(folder: Path, text: str) -> Path:
    path = folder / "conf" / "citewise.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path.resolve()


def test_every_setting_is_a_variable_and_a_key_and_nothing_else(no_settings):
    """The settings an operator can set are exactly these (where each is held is not theirs
    to see, so neither is the order)."""
    values = _by_name(load())
    tables = {"sources", "groups", "llm_providers", "guardrails", "slack_channels",
              "slack_groups"}
    removed = {"api_keys"}
    assert sorted(n for n in values if n not in tables | removed | {"config_file"}) == \
        sorted(NAMES)
    assert len(NAMES) == len(set(NAMES)) == 112


def test_defaults(no_settings):
    values = _by_name(load())
    assert {n: values[n] for n in NAMES} == {row[0]: row[1] for row in SURFACE}
    assert values["config_file"] is None
    for table in ("sources", "groups", "llm_providers", "guardrails", "slack_channels"):
        assert values[table] == [], table
    assert values["slack_groups"] == {}


def test_the_config_file_beats_the_defaults_and_the_environment_beats_both(no_settings,
                                                                            monkeypatch):
    config = _config(no_settings, "[settings]\n" + "".join(
        f"{name} = {_toml(in_file)}\n" for name, _, in_file, *_ in SURFACE))
    from_file = _by_name(load(config))
    assert {n: from_file[n] for n in NAMES} == {
        name: _here(read, config.parent) for name, _, _, read, _, _ in SURFACE}
    assert from_file["config_file"] == config

    for name, *_, in_env, _ in SURFACE:
        monkeypatch.setenv(f"CITEWISE_{name.upper()}", in_env)
    from_env = _by_name(load(config))
    assert {n: from_env[n] for n in NAMES} == {name: read for name, *_, read in SURFACE}


def test_a_key_that_names_no_setting_is_ignored(no_settings):
    config = _config(no_settings, '[settings]\nport = 9001\nnot_a_setting = 1\nserver = "x"\n'
                                  'index = 3\n')
    assert _by_name(load(config))["port"] == 9001


def test_overrides_beat_the_environment(no_settings, monkeypatch):
    """What the CLI's options pass (``--data-dir``, ``--host``) wins over the variables."""
    monkeypatch.setenv("CITEWISE_PORT", "9100")
    monkeypatch.setenv("CITEWISE_DATA_DIR", "/nonexistent/env-data")
    values = _by_name(load(None, port=9200, data_dir=Path("/nonexistent/cli-data")))
    assert (values["port"], values["data_dir"]) == (9200, Path("/nonexistent/cli-data"))


def test_which_config_file_is_read(no_settings, monkeypatch):
    here = no_settings / "citewise.toml"
    here.write_text('[settings]\nport = 9001\n')
    assert _by_name(load())["port"] == 9001, "./citewise.toml when present"
    named = _config(no_settings, '[settings]\nport = 9002\n')
    monkeypatch.setenv("CITEWISE_CONFIG_FILE", str(named))
    values = _by_name(load())
    assert (values["port"], values["config_file"]) == (9002, named)
    assert _by_name(load(here))["port"] == 9001, "the argument beats CITEWISE_CONFIG_FILE"


def test_the_schedule_table_is_settings_under_another_name(no_settings, monkeypatch):
    config = _config(no_settings, '[settings]\nschedule_timezone = "Asia/Tokyo"\n'
                                  '[schedule]\ningest = "@hourly"\ntimezone = "Europe/Oslo"\n'
                                  'catch_up = false\n')
    values = _by_name(load(config))
    assert (values["schedule_ingest"], values["schedule_timezone"],
            values["schedule_catch_up"]) == ("@hourly", "Europe/Oslo", False)
    monkeypatch.setenv("CITEWISE_SCHEDULE_INGEST", "@daily")
    assert _by_name(load(config))["schedule_ingest"] == "@daily"


def test_the_tables_reach_the_settings(no_settings):
    config = _config(no_settings, """
[[sources]]
name = "runbooks"
type = "folder"
path = "rb"

[[groups]]
name = "eng"
members = ["Dana@Example.com"]
email_domains = ["@eng.example.com"]

[[llm.providers]]
name = "vllm"
base_url = "http://vllm:8000/v1/"
model = "m"

[[guardrails]]
name = "hr"
kind = "deny"
action = "block"
terms = ["salary"]

[slack.groups]
S0123 = "group:oncall"

[[slack.channels]]
id = "C0123"
sources = ["runbooks"]
""")
    values = _by_name(load(config, default_readers="group:sre"))
    source, = values["sources"]
    assert (source.name, source.readers, source.options()["path"]) == (
        "runbooks", ["group:sre"], str(config.parent / "rb"))
    group, = values["groups"]
    assert (group.name, group.members, group.email_domains) == ("eng", ["dana@example.com"],
                                                                ["eng.example.com"])
    provider, = values["llm_providers"]
    assert (provider.name, provider.base_url) == ("vllm", "http://vllm:8000/v1")
    assert [(g.name, g.kind, g.terms) for g in values["guardrails"]] == [
        ("hr", "deny", ["salary"])]
    assert [(c.id, c.sources, c.mention_only) for c in values["slack_channels"]] == [
        ("C0123", ["runbooks"], True)]
    assert values["slack_groups"] == {"S0123": "group:oncall"}


def test_the_tables_come_from_the_file_only(no_settings):
    """An override of a table is not read: the file (or its absence) says what they hold."""
    config = _config(no_settings, '[[sources]]\nname = "a"\ntype = "folder"\npath = "a"\n'
                                  'readers = ["public"]\n')
    values = _by_name(load(config, guardrails=[{"name": "x", "kind": "pii",
                                                "action": "redact"}]))
    assert values["guardrails"] == []
    assert [s.name for s in values["sources"]] == ["a"]


PATH = "{path}"
ERRORS: dict[str, tuple[dict[str, str], str, str, str | None]] = {
    "a bound, from the environment": (
        {"CITEWISE_RATE_SEARCH_PER_MINUTE": "-1"}, "",
        "invalid settings: rate_search_per_minute: Input should be greater than or equal to 0",
        None),
    "a number, from the environment": (
        {"CITEWISE_PORT": "eighty"}, "",
        "invalid settings: port: Input should be a valid integer, unable to parse string as an "
        "integer", None),
    "a boolean, from the environment": (
        {"CITEWISE_ANSWER_CACHE": "maybe"}, "",
        "invalid settings: answer_cache: Input should be a valid boolean, unable to interpret "
        "input", None),
    "a choice, from the file": (
        {}, '[settings]\nblob_store = "gcs"\n',
        "invalid settings: blob_store: Input should be 'local' or 's3'", None),
    "a lower bound, from the file": (
        {}, "[settings]\nllm_timeout = 0\n",
        "invalid settings: llm_timeout: Input should be greater than 0", None),
    "an upper bound, from the file": (
        {}, "[settings]\nsearch_dense_weight = 1.5\n",
        "invalid settings: search_dense_weight: Input should be less than or equal to 1", None),
    "three at once": (
        {"CITEWISE_PORT": "x"}, "[settings]\nllm_timeout = 0\nmin_free_mb = -1\n",
        "invalid settings: min_free_mb: Input should be greater than or equal to 0; "
        "llm_timeout: Input should be greater than 0; port: Input should be a valid integer, "
        "unable to parse string as an integer", None),
    "an unknown table": (
        {}, "[server]\nport = 1\n",
        f"config file {PATH} has unknown top-level keys: ['server']",
        "only [settings], [schedule], [[sources]], [[groups]], [[llm.providers]], "
        "[[guardrails]] and [slack] are read"),
    "[llm] with other keys": (
        {}, '[llm]\nmodel = "x"\n',
        f"config file {PATH}: [llm] only holds [[llm.providers]]", "see citewise.example.toml"),
    "[slack] with other keys": (
        {}, '[slack]\ntoken = "x"\n',
        f"config file {PATH}: [slack] holds [[slack.channels]] and [slack.groups]",
        "see docs/slack.md"),
    "[schedule] with other keys": (
        {}, '[schedule]\ncron = "x"\n',
        f"config file {PATH}: [schedule] holds ingest, timezone and catch_up",
        'e.g. [schedule] ingest = "30 2 * * *"'),
    "a provider's URL": (
        {}, '[[llm.providers]]\nname = "p"\nbase_url = "ftp://x"\nmodel = "m"\n',
        "invalid settings: base_url: Value error, base_url must be an http(s) URL ending in /v1",
        None),
    "a provider's missing fields": (
        {}, '[[llm.providers]]\nname = "p"\n',
        "invalid settings: base_url: Field required; model: Field required", None),
    "a deny guardrail without terms": (
        {}, '[[guardrails]]\nname = "g"\nkind = "deny"\naction = "block"\n',
        "invalid settings: : Value error, guardrail 'g': a deny policy needs terms", None),
    "a guardrail's kind": (
        {}, '[[guardrails]]\nname = "g"\nkind = "magic"\naction = "block"\n',
        "invalid settings: kind: Input should be 'injection', 'secrets', 'pii' or 'deny'",
        None),
    "a Slack channel's id": (
        {}, '[[slack.channels]]\nid = "general"\n',
        "invalid settings: id: String should match pattern '^[CGD][A-Z0-9]{2,}$'", None),
    "a group's name": (
        {}, '[[groups]]\nname = "bad name"\n',
        "invalid settings: name: String should match pattern "
        "'^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$'", None),
    "a group's unknown key": (
        {}, '[[groups]]\nname = "eng"\nmembrs = ["a@b"]\n',
        "invalid settings: membrs: Extra inputs are not permitted", None),
    "a source's name": (
        {}, '[[sources]]\nname = "Bad Name!"\ntype = "folder"\n',
        "invalid settings: name: Value error, source name 'Bad Name!' must be lowercase "
        "letters, digits, '.', '_' or '-' (at most 63 characters), e.g. 'runbooks' or "
        "'eng-wiki'", None),
    "two sources of one name": (
        {}, '[[sources]]\nname = "a"\ntype = "folder"\npath = "x"\n'
            '[[sources]]\nname = "a"\ntype = "folder"\npath = "y"\n',
        "source names must be unique; repeated: ['a']", None),
    "the removed API keys variable": (
        {"CITEWISE_API_KEYS": "k1"}, "",
        "CITEWISE_API_KEYS is no longer read: keys live in the catalog, hashed, with scopes",
        "create one per client with `citewise keys create NAME --scopes search,answer` and "
        "unset CITEWISE_API_KEYS"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_say_what_is_wrong(case, no_settings, monkeypatch):
    env, text, message, hint = ERRORS[case]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = _config(no_settings, text)
    with pytest.raises(ConfigError) as raised:
        load(config)
    assert (raised.value.message, raised.value.hint) == (message.replace(PATH, str(config)),
                                                         hint)
