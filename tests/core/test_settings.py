from __future__ import annotations

import pytest

from citewise.api.settings import Settings
from citewise.errors import ConfigError
from citewise.settings import find_source


def test_defaults(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    s = Settings.load()
    assert str(s.data_dir) == "data"
    assert s.index.qdrant_url is None and s.index.blob_store == "local"
    assert s.sources == []


def test_config_file_sources_and_env_precedence(monkeypatch, tmp_path):
    cfg = tmp_path / "conf" / "citewise.toml"
    cfg.parent.mkdir()
    cfg.write_text(
        '[settings]\ndata_dir = "state"\nport = 9000\n\n'
        '[[sources]]\nname = "runbooks"\ntype = "folder"\npath = "../rb"\n'
        'readers = ["group:sre"]\n'
    )
    monkeypatch.setenv("CITEWISE_PORT", "9100")
    s = Settings.load(cfg)
    assert s.server.port == 9100, "the environment beats the file"
    assert s.data_dir == cfg.parent / "state", "relative paths are relative to the file"
    src = find_source(s.sources, "runbooks")
    assert src.readers == ["group:sre"]
    assert src.options()["path"] == str(cfg.parent / "../rb")


def test_bad_config_says_what_is_wrong(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[sources]]\nname = "Bad Name!"\ntype = "folder"\n')
    with pytest.raises(ConfigError, match="lowercase"):
        Settings.load(cfg)
    cfg.write_text("[settings\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Settings.load(cfg)
    with pytest.raises(ConfigError, match="does not exist"):
        Settings.load(tmp_path / "missing.toml")


def test_unknown_source_lists_known_ones(tmp_path):
    from citewise.errors import NotFoundError

    cfg = tmp_path / "c.toml"
    cfg.write_text('[[sources]]\nname = "wiki"\ntype = "folder"\npath = "w"\n')
    with pytest.raises(NotFoundError, match="known: wiki"):
        find_source(Settings.load(cfg).sources, "runbooks")


def test_readme_documents_every_setting():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name, (_, field) in Settings.setting_fields().items():
        if not field.exclude:  # sources, groups: config-file tables; api_keys: removed
            assert f"`CITEWISE_{name.upper()}`" in readme, f"README misses CITEWISE_{name.upper()}"


def test_the_example_config_loads_and_every_source_builds(monkeypatch, tmp_path):
    """citewise.example.toml is what error hints point at: it must stay valid."""
    from pathlib import Path

    from citewise.connectors.registry import build_connector

    example = Path(__file__).resolve().parents[2] / "citewise.example.toml"
    for name in ("CITEWISE_GIT_TOKEN", "CITEWISE_CONFLUENCE_EMAIL", "CITEWISE_CONFLUENCE_TOKEN"):
        monkeypatch.setenv(name, "x")
    settings = Settings.load(example)
    assert {s.type for s in settings.sources} == {"folder", "git", "confluence"}
    assert [p.name for p in settings.gateway.llm_providers] == ["vllm", "workers-ai"]
    assert settings.gateway.llm_providers[1].api_key_env == "CITEWISE_WORKERS_AI_TOKEN"
    assert [(g.name, g.kind) for g in settings.answering.guardrails] == [
        ("hr-cases", "deny"), ("personal-data", "pii")]
    for source in settings.sources:  # options are checked; nothing is read yet
        assert build_connector(source, data_dir=tmp_path) is not None


def test_a_missing_config_file_points_at_the_example(tmp_path):
    with pytest.raises(ConfigError) as raised:
        Settings.load(tmp_path / "nope.toml")
    assert "citewise.example.toml" in raised.value.hint
