"""Who is calling: Cloudflare Access and OIDC tokens verified against a key set served on
loopback (keys generated here), the attacks a verifier must refuse, and fail-closed start-up.

The identity provider is ``tests/fakes/identity_provider.py``; its shapes follow Cloudflare's
"Validate JWTs" page and OpenID Connect.
"""

from __future__ import annotations

import time

import httpx
import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.identity.settings import GroupConfig
from citewise.errors import ConfigError
from citewise.ingest.jobs import run_source
from tests.fakes.identity_provider import IdentityProvider, SigningKey
from tests.kb import SECRET, SECRET_WORDS, folder_source, make_key, stored_rows
from tests.live import LiveServer

AUD = "4714c1358e65fe4b408ad6d432a5f878f08194bdb4752441fd56faefa9b2b6f2"
CLIENT_ID = "citewise"
SECRET_Q = {"question": "How are the payment provider API keys rotated?"}
LOOPBACK = ("127.0.0.1", 50000)


@pytest.fixture
def idp():
    with IdentityProvider() as provider:
        yield provider


def _services(make_services, kb, idp, *, ingest=True, **overrides):
    services = make_services(
        require_auth=True,
        access_team_domain=idp.access_issuer, access_aud=AUD,
        access_jwks_url=idp.access_certs_url,
        oidc_issuer=idp.oidc_issuer, oidc_audience=CLIENT_ID, oidc_jwks_url=idp.oidc_jwks_url,
        admin_groups="platform", rate_answer_per_minute=0, rate_search_per_minute=0,
        **overrides)
    services.settings.identity.groups = [
        GroupConfig(name="security", members=["Dana@Example.com"]),
        GroupConfig(name="platform", members=["ops@example.com"]),
        GroupConfig(name="engineering", email_domains=["example.com"])]
    if ingest:
        assert run_source(services.pipeline, folder_source(kb), trigger="t").status == \
            "succeeded"
    return services


def _cites_secret(resp) -> bool:
    assert resp.status_code == 200, resp.text
    body = resp.json()
    return any(c["path"] == SECRET for c in body["citations"]) or any(
        w in body["answer"] for w in SECRET_WORDS)


def test_an_access_token_names_the_user_and_the_mapping_their_groups(make_services, kb, idp):
    services = _services(make_services, kb, idp)
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        dana = {"Cf-Access-Jwt-Assertion": idp.access_token("dana@example.com", AUD)}
        eve = {"Cf-Access-Jwt-Assertion": idp.access_token("eve@example.com", AUD)}
        assert _cites_secret(c.post("/v1/answer", json=SECRET_Q, headers=dana))
        assert not _cites_secret(c.post("/v1/answer", json=SECRET_Q, headers=eve))
        # Signed-in people get search and answer; admin only through an admin group.
        assert c.get("/v1/usage", headers=dana).status_code == 403
        ops = {"Cf-Access-Jwt-Assertion": idp.access_token("ops@example.com", AUD)}
        usage = c.get("/v1/usage", params={"group_by": "principal"}, headers=ops)
        assert usage.status_code == 200, usage.text
        principals = {r["principal"] for r in usage.json()["rows"]}
        assert {"user:dana@example.com", "user:eve@example.com"} <= principals
        # The token says who you are: identity headers on top are refused, not merged.
        both = {**eve, "X-Citewise-Groups": "security"}
        assert c.post("/v1/answer", json=SECRET_Q, headers=both).status_code == 403


def test_an_oidc_token_brings_its_groups_claim(make_services, kb, idp):
    services = _services(make_services, kb, idp)
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        # Keycloak writes group paths; the leading slash is not part of the name.
        li = {"Authorization": "Bearer " + idp.oidc_token("li@corp.test", CLIENT_ID,
                                                           groups=["/security", "/eng"])}
        assert _cites_secret(c.post("/v1/answer", json=SECRET_Q, headers=li))
        nobody = {"Authorization": "Bearer " + idp.oidc_token("x@corp.test", CLIENT_ID,
                                                               groups=["eng", "bad group!"])}
        assert not _cites_secret(c.post("/v1/answer", json=SECRET_Q, headers=nobody))
        # Group names meet without case, as readers do: "Platform" is the admin group too.
        ops = {"Authorization": "Bearer " + idp.oidc_token("ops@corp.test", CLIENT_ID,
                                                            groups=["Platform"])}
        assert c.get("/v1/usage", headers=ops).status_code == 200


def _claims(idp, **changes) -> dict:
    now = int(time.time())
    base = {"aud": [AUD], "email": "dana@example.com", "exp": now + 3600, "iat": now,
            "nbf": now, "iss": idp.access_issuer, "type": "app", "sub": "u-1"}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


ATTACKS = {
    "alg none": lambda idp: idp.unsigned(_claims(idp)),
    "hs256 with the public key": lambda idp: idp.hs256_with_public_key(_claims(idp)),
    "expired": lambda idp: idp.sign(_claims(idp, exp=int(time.time()) - 300,
                                            iat=int(time.time()) - 4000)),
    "not yet valid": lambda idp: idp.sign(_claims(idp, nbf=int(time.time()) + 600)),
    "issued in the future": lambda idp: idp.sign(_claims(idp, iat=int(time.time()) + 600)),
    "wrong audience": lambda idp: idp.sign(_claims(idp, aud=["another-application"])),
    "wrong issuer": lambda idp: idp.sign(_claims(idp, iss="https://evil.cloudflareaccess.com")),
    "no expiry": lambda idp: idp.sign(_claims(idp, exp=None)),
    "tampered payload": lambda idp: _tamper(idp.sign(_claims(idp, email="eve@example.com"))),
    "garbage": lambda idp: "not.a.jwt",
}


def _tamper(token: str) -> str:
    import base64
    import json

    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["email"] = "dana@example.com"  # claim to be someone with more access
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_forged_and_stale_tokens_are_refused(make_services, kb, idp, attack):
    services = _services(make_services, kb, idp)
    token = ATTACKS[attack](idp)
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        for headers in ({"Cf-Access-Jwt-Assertion": token},):
            resp = c.post("/v1/answer", json=SECRET_Q, headers=headers)
            assert resp.status_code == 401, (attack, resp.text)
            body = resp.json()
            assert body["type"] == "urn:citewise:error:unauthorized"
            assert resp.headers["www-authenticate"].startswith("Bearer")
            assert not any(w in resp.text for w in SECRET_WORDS)
        # The same token as an OIDC bearer token fails too (another issuer and audience).
        resp = c.post("/v1/answer", json=SECRET_Q, headers={"Authorization": f"Bearer {token}"})
        assert resp.status_code == 401
    entries = stored_rows(services).execute(
        "SELECT * FROM audit WHERE action = 'request.refused'").fetchall()
    assert entries and all(e["outcome"] == "denied" for e in entries)


def test_an_unknown_kid_refetches_the_key_set_once_then_refuses(make_services, kb, idp):
    services = _services(make_services, kb, idp)
    stranger = SigningKey()  # a key the provider never published
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        good = {"Cf-Access-Jwt-Assertion": idp.access_token("dana@example.com", AUD)}
        assert c.post("/v1/search", json={"query": "redis"}, headers=good).status_code == 200
        assert idp.hits == 1
        bad = {"Cf-Access-Jwt-Assertion": idp.access_token("dana@example.com", AUD,
                                                           key=stranger)}
        for _ in range(5):
            resp = c.post("/v1/search", json={"query": "redis"}, headers=bad)
            assert resp.status_code == 401
            assert "does not list" in resp.json()["detail"]
        assert idp.hits == 2  # one refetch for the unknown kid, not one per request
        # Known keys keep working without fetching again.
        assert c.post("/v1/search", json={"query": "redis"}, headers=good).status_code == 200
        assert idp.hits == 2


def test_a_rotated_key_is_picked_up(make_services, kb, idp, monkeypatch):
    from citewise.api.identity import tokens

    monkeypatch.setattr(tokens, "REFETCH_INTERVAL", 0.0)
    services = _services(make_services, kb, idp)
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        old = {"Cf-Access-Jwt-Assertion": idp.access_token("dana@example.com", AUD)}
        assert c.post("/v1/search", json={"query": "redis"}, headers=old).status_code == 200
        idp.rotate()
        new = {"Cf-Access-Jwt-Assertion": idp.access_token("dana@example.com", AUD)}
        assert c.post("/v1/search", json={"query": "redis"}, headers=new).status_code == 200
        # The previous key stays listed for a while, so tokens signed with it still verify.
        assert c.post("/v1/search", json={"query": "redis"}, headers=old).status_code == 200


def test_an_unreachable_key_set_is_503_never_a_pass(make_services, kb, idp, caplog):
    services = _services(make_services, kb, idp)
    idp.down = True
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        token = {"Cf-Access-Jwt-Assertion": idp.access_token("dana@example.com", AUD)}
        with caplog.at_level("ERROR", logger="citewise.identity"):
            resp = c.post("/v1/answer", json=SECRET_Q, headers=token)
        assert resp.status_code == 503, resp.text
        body = resp.json()
        assert body["type"] == "urn:citewise:error:identity_provider_unavailable"
        assert body["detail"] and body["hint"]
        # Where the key set lives is for the operator's log, not for an unauthenticated caller.
        assert idp.url not in resp.text and "127.0.0.1" not in resp.text
        assert idp.access_certs_url in caplog.text and "503" in caplog.text
        assert not any(w in resp.text for w in SECRET_WORDS)
        idp.down = False
        assert _cites_secret(c.post("/v1/answer", json=SECRET_Q, headers=token))


def test_a_jwks_file_serves_air_gapped_installs(make_services, kb, idp, tmp_path):
    import json

    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(idp.certs()))
    services = _services(make_services, kb, idp, oidc_jwks_file=str(path))
    services.settings.identity.oidc_jwks_url = None
    with TestClient(create_app(services=services), client=LOOPBACK) as c:
        token = {"Authorization": "Bearer " + idp.oidc_token("li@corp.test", CLIENT_ID,
                                                              groups=["security"])}
        assert _cites_secret(c.post("/v1/answer", json=SECRET_Q, headers=token))
    assert idp.hits == 0


# Fail closed at start ------------------------------------------------------------------------


def test_a_server_reachable_from_elsewhere_needs_an_identity_method(make_services, caplog):
    services = make_services()
    with pytest.raises(ConfigError) as raised:
        create_app(services=services, bind_host="0.0.0.0")
    assert "citewise keys create" in raised.value.hint
    assert "--insecure-trust-identity-headers" in raised.value.hint
    create_app(services=services, bind_host="127.0.0.1")  # loopback: local mode is fine
    make_key(services, "bot", "search")
    app = create_app(services=services, bind_host="0.0.0.0")
    with TestClient(app, client=("10.0.0.7", 5000)) as c:
        assert c.post("/v1/search", json={"query": "x"}).status_code == 401  # required there


def test_require_auth_false_on_a_public_address_is_refused(make_services):
    services = make_services(require_auth=False)
    make_key(services, "bot", "search")
    with pytest.raises(ConfigError):
        create_app(services=services, bind_host="0.0.0.0")


def test_the_loud_flag_trusts_headers_and_says_so(make_services, kb, caplog):
    services = make_services(insecure_trust_identity_headers=True)
    run_source(services.pipeline, folder_source(kb), trigger="t")
    with caplog.at_level("WARNING"):
        app = create_app(services=services, bind_host="0.0.0.0")
    assert any("INSECURE" in r.message for r in caplog.records)
    with TestClient(app, client=("10.0.0.7", 5000)) as c:
        assert _cites_secret(c.post("/v1/answer", json=SECRET_Q,
                                    headers={"X-Citewise-Groups": "security"}))
        assert c.get("/v1/usage").status_code == 403  # headers never grant admin


def test_local_mode_is_loopback_only_for_operators(make_services):
    services = make_services()
    with TestClient(create_app(services=services), client=("10.0.0.7", 5000)) as remote:
        assert remote.post("/v1/search", json={"query": "x"}).status_code == 200
        assert remote.get("/v1/keys").status_code == 403
    with TestClient(create_app(services=services), client=LOOPBACK) as local:
        assert local.get("/v1/keys").status_code == 200


def _raw_token(header, payload: dict | None = None) -> str:
    """A token whose header is whatever the test says, JSON or not; signature bytes are junk
    (these must be refused before any key is looked up)."""
    import base64
    import json

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return f"{b64(raw)}.{b64(json.dumps(payload or {'sub': 'x'}).encode())}.{b64(b'sig')}"


MALFORMED = {
    "kid is a number": lambda idp: _raw_token({"alg": "RS256", "kid": 7}),
    "kid is an object": lambda idp: _raw_token({"alg": "RS256", "kid": {"k": idp.keys[0].kid}}),
    "crit extension": lambda idp: _raw_token({"alg": "RS256", "kid": idp.keys[0].kid,
                                              "crit": ["exp"], "exp": 1}),
    "header is not JSON": lambda idp: _raw_token(b'{"alg": "RS256", "kid": '),
    "header is a list": lambda idp: _raw_token(["RS256"]),
    "alg is a list": lambda idp: _raw_token({"alg": ["RS256"], "kid": idp.keys[0].kid}),
    "alg is an object": lambda idp: _raw_token({"alg": {"RS256": 1}, "kid": "x"}),
    "not base64": lambda idp: "%%%.%%%.%%%",
}


def test_malformed_token_headers_are_401s_with_an_audit_entry(make_services, kb, idp):
    """Found by the probe (issue 30, item 6): a non-string kid or a crit header was a 500 from
    inside the verifier, before authentication, and so never reached the audit log."""
    services = _services(make_services, kb, idp, ingest=False)
    tokens = {name: make(idp) for name, make in MALFORMED.items()}
    with LiveServer(create_app(services=services), services.settings) as url:
        for name, token in tokens.items():
            for headers in ({"Cf-Access-Jwt-Assertion": token},
                            {"Authorization": f"Bearer {token}"}):
                resp = httpx.post(f"{url}/v1/search", json={"query": "redis"},
                                  headers=headers)
                assert resp.status_code == 401, (name, resp.status_code, resp.text)
                assert resp.headers["content-type"].startswith("application/problem+json")
                assert resp.json()["type"] == "urn:citewise:error:unauthorized", name
                assert resp.headers["www-authenticate"].startswith("Bearer")
    refused = stored_rows(services).execute(
        "SELECT count(*) FROM audit WHERE action = 'request.refused' "
        "AND json_extract(detail, '$.status') = 401").fetchone()[0]
    # Every refusal is audited (below the audit log's 20 per client and minute).
    assert refused == 2 * len(tokens) <= 20


def test_the_identity_methods_are_described_for_the_start_up_log(make_services, kb, idp):
    """`citewise serve` logs this line at start (tests/api/test_reload.py reads it there)."""
    services = _services(make_services, kb, idp, ingest=False)
    make_key(services, "bot", "search")
    door = create_app(services=services, bind_host="0.0.0.0").state.door
    said = door.authenticator.describe()
    assert said.startswith("API keys (1 active), "), said
    assert f"Cloudflare Access (team {idp.access_issuer})" in said, said
    assert f"OIDC (issuer {idp.oidc_issuer})" in said, said
    assert "admin groups platform" in said, said
    assert "local mode" not in said  # authentication is required here
    assert AUD not in said
