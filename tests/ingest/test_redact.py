"""Secret redaction: credentials go, line numbers stay, ordinary prose and code are left alone."""

from __future__ import annotations

import pytest

from citewise.ingest.redact import redact_document, redact_text
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
