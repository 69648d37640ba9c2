"""Secret redaction: credentials go, line numbers stay, ordinary prose and code are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from citewise.ingest.redact import redact_document, redact_text
from citewise.ingest.redact_plugins import KINDS
from citewise.types import SourceDocument

# Fake, but shaped like the real thing.
CASES = [
    ("aws-access-key-id", "key_id = AKIAZ7QX3PLM4NR2TW5Y", "AKIAZ7QX3PLM4NR2TW5Y"),
    ("aws-secret-access-key", "aws_secret_access_key = q8Vd2Lr7Xb0Ty5Nc4Hw1Zs6Jk9Pm3Gf8Ua2Ee7Ro",
     "q8Vd2Lr7Xb0Ty5Nc4Hw1Zs6Jk9Pm3Gf8Ua2Ee7Ro"),
    ("github-token", "GITHUB_TOKEN=ghp_Zq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6Hf3Pa1Ue8Gj",
     "ghp_Zq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6Hf3Pa1Ue8Gj"),
    ("gitlab-token", "token: glpat-Xr5Vn2Bc7Kd4Ws9Ty6Hf", "glpat-Xr5Vn2Bc7Kd4Ws9Ty6Hf"),
    ("slack-token", "SLACK = 'xoxb-2048-Zq81Lm0Xr5Vn2Bc7'", "xoxb-2048-Zq81Lm0Xr5Vn2Bc7"),
    ("jwt", "auth: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
     "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N"),
    ("bearer-token", 'curl -H "Authorization: Bearer Zq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6"',
     "Zq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6"),
    ("connection-string-password", "DATABASE_URL=postgres://app:S3cr3t-Pw0rd@db.internal/prod",
     "S3cr3t-Pw0rd"),
    ("password", 'password = "hunter22"', "hunter22"),
    ("password", "db_password: Zk8mQ2xv9L", "Zk8mQ2xv9L"),
    ("secret", 'client_secret = "9f86d081884c7d659a2feaa0c55ad015"',
     "9f86d081884c7d659a2feaa0c55ad015"),
    ("api-key", '"api_key": "AbC123xYz789QwE456"', "AbC123xYz789QwE456"),
]


@pytest.mark.parametrize("kind, line, secret", CASES, ids=[c[0] + str(i) for i, c in
                                                           enumerate(CASES)])
def test_detects_and_redacts(kind, line, secret):
    text = f"first line\n{line}\nlast line\n"
    out, findings = redact_text(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out
    assert findings == [{"kind": kind, "line": 2}]
    assert out.count("\n") == text.count("\n")


def test_private_key_block_keeps_the_line_count():
    text = ("key = '''\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n"
            "QyNTUxOQAAACD8fakefakefake\n-----END OPENSSH PRIVATE KEY-----\n'''\nprint(key)\n")
    out, findings = redact_text(text)
    assert "b3BlbnNzaC1rZXkt" not in out and "QyNTUxOQ" not in out
    assert out.count("\n") == text.count("\n")
    assert out.split("\n")[1:5] == ["[REDACTED:private-key]"] * 4
    assert out.split("\n")[6] == "print(key)"
    assert findings == [{"kind": "private-key", "line": 2}]
    # Written on one line with \n escapes, as in JSON service-account files.
    escaped = ('{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\n'
               '-----END PRIVATE KEY-----\\n"}')
    assert "MIIEvQIBADAN" not in redact_text(escaped)[0]


KEPT = [
    "The password must be at least 12 characters; ask for a token in #help.",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed it",
    "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d08c1bb0f5d6d",
    'TOKEN_ENV = "CITEWISE_GIT_TOKEN"',
    "api_key = settings.api_key",
    'secret_key = os.environ["SECRET_KEY"]',
    'password = request.form["password"]',
    "max_tokens = 200",
    "count_tokens: Callable[[str], int]",
    "token: str | None = None",
    "PGPASSWORD=${DB_PASSWORD} psql",
    'client_secret: "<your-client-secret>"',
    "GEM_HOST_API_KEY: ${{ secrets.RUBYGEMS_API_KEY }}",
    "postgres://app:<password>@db/prod",
    "redis://:${REDIS_PASSWORD}@cache:6379",
    "Image pull secrets:  prometheus-k8s-dockercfg-6wl6b",
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "Send the header `Authorization: Bearer <token>`.",
    'secret_file = "secrets/prod.yaml"',
    "password_hash = hashlib.sha256(raw).hexdigest()",
]


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_text_and_code_are_kept(text):
    assert redact_text(text) == (text, [])


def test_redact_document_redacts_content_and_body_and_records_only_kind_and_line():
    raw = "---\ntitle: Deploy\n---\n# Deploy\n\nUse AKIAZ7QX3PLM4NR2TW5Y for the bucket.\n"
    doc = SourceDocument(external_id="d.md", title="Deploy", content=raw.encode(),
                         media_type="text/markdown", body=raw.split("---\n", 2)[2],
                         body_line_offset=3, metadata={"service": "web"})
    clean = redact_document(doc)
    assert b"AKIAZ7QX3PLM4NR2TW5Y" not in clean.content
    assert "AKIAZ7QX3PLM4NR2TW5Y" not in clean.body
    assert clean.metadata == {"service": "web",
                              "redactions": [{"kind": "aws-access-key-id", "line": 6}]}
    assert doc.content == raw.encode() and "redactions" not in doc.metadata  # a copy
    assert clean.content_hash != doc.content_hash


def test_clean_document_is_returned_unchanged_and_odd_bytes_survive():
    doc = SourceDocument(external_id="a", title="a", content=b"caf\xe9 menu\n",
                         media_type="text/plain")
    assert redact_document(doc).content == doc.content
    dirty = SourceDocument(external_id="b", title="b",
                           content=b"caf\xe9 AKIAZ7QX3PLM4NR2TW5Y\n", media_type="text/plain")
    out = redact_document(dirty).content
    assert out == b"caf\xe9 [REDACTED:aws-access-key-id]\n"


def test_fast_enough_for_every_document():
    import time

    text = ("Ordinary runbook prose about tokens, passwords and keys; "
            "export TOKEN=$VAULT_TOKEN; curl https://example.com/api?x=1\n") * 20000  # ~2.4 MB
    started = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - started < 5.0  # ~0.3 s here; generous for a loaded CI box


# Secrets that passed through before detect-secrets' plugins and the prose/DSN shapes: AWS's own
# documentation example pair, and a Sentry DSN (the key lets anyone post events).
PASSED_BEFORE = [
    ("aws_access_key_id AKIAIOSFODNN7EXAMPLE and the secret "
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     ["AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"],
     ["aws-access-key-id", "aws-secret-access-key"]),
    ("The key AKIAZ7QX3PLM4NR2TW5Y goes with\n"
     "q8Vd2Lr7Xb0Ty5Nc4Hw1Zs6Jk9Pm3Gf8Ua2Ee7Ro (rotate both).",
     ["AKIAZ7QX3PLM4NR2TW5Y", "q8Vd2Lr7Xb0Ty5Nc4Hw1Zs6Jk9Pm3Gf8Ua2Ee7Ro"],
     ["aws-access-key-id", "aws-secret-access-key"]),
    ("For AWS, the secret is 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.",
     ["q8Vd2Lr7Xb0Ty5Nc4Hw1Zs6Jk9Pm3Gf8Ua2Ee7Ro"], ["aws-secret-access-key"]),
    ("SENTRY_DSN https://9f86d081884c7d659a2feaa0c55ad015@o447951.ingest.sentry.io/5434472",
     ["9f86d081884c7d659a2feaa0c55ad015"], ["sentry-dsn"]),
    ("dsn: https://9f86d081884c7d659a2feaa0c55ad015:3f786850e387550fdab836ed7e6dc881"
     "@sentry.acme.internal/sentry/12",
     ["9f86d081884c7d659a2feaa0c55ad015", "3f786850e387550fdab836ed7e6dc881"], ["sentry-dsn"]),
]


@pytest.mark.parametrize("text, secrets, kinds", PASSED_BEFORE,
                         ids=["aws-prose", "aws-next-line", "aws-secret-word", "sentry-dsn",
                              "sentry-legacy-dsn"])
def test_secrets_that_passed_before_are_redacted(text, secrets, kinds):
    out, findings = redact_text(text)
    for secret in secrets:
        assert secret not in out
    assert [f["kind"] for f in findings] == kinds
    assert out.count("\n") == text.count("\n")


def test_a_sentry_dsn_keeps_its_host():
    out, _ = redact_text("https://9f86d081884c7d659a2feaa0c55ad015@o447951.ingest.sentry.io/54")
    assert out == "https://[REDACTED:sentry-dsn]@o447951.ingest.sentry.io/54"


# One realistic sample per detect-secrets plugin enabled in ingest/redact_plugins.py, written
# as prose so that no other detector of ours claims it first.
PLUGIN_CASES = [
    ("artifactory-credentials", "the artifactory token is {}",
     "AKCp8jQ8tKp3Lq9sXv2Yb7Nc4Hw1Zs6Jk9Pm3Gf8Ua2Ee7RoXyZq81Lm0Xr5Vn2Bc7Kd4Ws"),
    ("artifactory-credentials", "encrypted password {} from the UI", "AP6Zq81Lm0Xr5Vn2Bc7"),
    ("azure-storage-account-access-key",
     "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={};EndpointSuffix=core.windows"
     ".net", "AccountKey=" + "Zq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6Hf3Pa1Ue8Gj0Qw+Er/TZq81Lm0Xr5Vn2Bc7Kd4W"
     "s9Ty6Hf3Pa1Ue8Gj0Qw+Er/T=="),
    ("cloudant-credentials", "cloudant_apikey {}", "cwhqnvxbrtzplmkjdsfeoyai"),
    ("discord-bot-token", "bot token {} in the vault",
     "MTA5ODc2NTQzMjEwOTg3NjU0.GhT1xY.Zq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6Hf3P"),
    ("ibm-cloud-iam-key", "Create the IAM key {} in the console",
     "Zq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6Hf3Pa1Ue8Gj0Qw_Er-T"),
    ("ibm-cos-hmac-credentials", "the HMAC secret_key {} of the bucket",
     "3f786850e387550fdab836ed7e6dc881de23001b5c0a1f2e"),
    ("mailchimp-access-key", "Mailchimp: {}", "9f86d081884c7d659a2feaa0c55ad015-us14"),
    ("pypi-token", "upload with {}",
     "pypi-AgEIcHlwaS5vcmcCJGE4ZjYxZTQ4LTk2ODMtNDE2Ni1hZjU5LWIxNDUwNmQ3ZjdlOAACKlsz"
     "LCJ4Zq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6Hf3Pa1Ue8Gj0Qw"),
    ("sendgrid-api-key", "SendGrid uses {}",
     "SG.Zq81Lm0Xr5Vn2Bc7Kd4Ws9.Ty6Hf3Pa1Ue8Gj0QwEr7TZq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6Hf3P"),
    ("softlayer-credentials", "call https://api.softlayer.com/soap/v3/{}",
     "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d08c1bb0f5d6d"),
    ("square-oauth-secret", "square app secret {}",
     "sq0csp-Zq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6Hf3Pa1Ue8Gj0QwEr7T"),
    ("telegram-bot-token", "the alert bot is {}",
     "123456789:AAHZq81Lm0Xr5Vn2Bc7Kd4Ws9Ty6Hf3Pa1U"),
    ("twilio-api-key", "Twilio account {}", "AC9f86d081884c7d659a2feaa0c55ad015"),
    ("twilio-api-key", "Twilio key {}", "SK9f86d081884c7d659a2feaa0c55ad015"),
]


@pytest.mark.parametrize("kind, template, secret", PLUGIN_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(PLUGIN_CASES)])
def test_every_enabled_detect_secrets_plugin_redacts_its_kind(kind, template, secret):
    text = "first line\n" + template.format(secret) + "\nlast line\n"
    out, findings = redact_text(text)
    assert secret not in out
    assert findings == [{"kind": kind, "line": 2}]
    assert out.count("\n") == text.count("\n")


def test_every_enabled_plugin_has_a_sample():
    assert {c[0] for c in PLUGIN_CASES} == KINDS


NEAR_MISSES = [
    # Hex ids, shas and UUIDs beside an AWS key id or a DSN-like URL: identifiers, kept.
    "Deployed in commit 3f786850e387550fdab836ed7e6dc881de23001b on the AWS account.",
    "AWS secret rotation landed in 3f786850e387550fdab836ed7e6dc881de23001b.",
    "request id 9f86d081-884c-7d65-9a2f-eaa0c55ad015, trace 4bf92f3577b34da6a3ce929d0e0e4736",
    "image: registry.acme.io/api@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d08c1"
    "bb0f5d6d",
    "https://sentry.io/organizations/acme/issues/4505123/?project=5434472",
    "https://app@o447951.ingest.sentry.io/5434472",  # no key
    "See docs/runbooks/aws/secrets-manager/rotating-the-database-credentials.md for AWS.",
    "kubectl -n payments rollout restart deployment/checkout-api-7c9f8b6d4-x2x7q",
    "APPLICATION_PROPERTIES and APDEX are metrics, ACCEPTANCE is a stage.",
    "telegram group 123456789 and pager 555-0100",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_kept(text):
    assert redact_text(text) == (text, [])


def test_the_demo_corpus_loses_nothing_to_the_detectors():
    """The demo runbooks are ordinary engineering text (commands, shas, ids, URLs): nothing in
    them is a credential. Before detect-secrets' plugins and the new shapes it had 0
    redactions; it must still have 0."""
    demo = Path(__file__).resolve().parents[2] / "demo"
    files = sorted(p for p in demo.rglob("*") if p.is_file())
    assert len(files) > 40
    found = {str(p.relative_to(demo)): f for p in files
             if (f := redact_text(p.read_text(encoding="utf-8"))[1])}
    assert found == {}
