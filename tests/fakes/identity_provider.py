"""An identity provider on loopback: a Cloudflare Access team and an OIDC issuer in one, for the
front door's tests and benchmark. Keys are generated here; nothing leaves the machine.

Shapes, as documented:

* Cloudflare Access ("Validate JWTs", developers.cloudflare.com/cloudflare-one/identity/users/
  validating-json): ``/cdn-cgi/access/certs`` lists the current and the previous key as JWKs
  (``kid`` a 64-hex digest, ``kty`` RSA, ``alg`` RS256, ``use`` sig, ``e``, ``n``), plus
  ``public_cert`` (the current key as a PEM certificate) and ``public_certs`` (both). Keys rotate
  every six weeks and the previous one stays valid for 7 days. The application token arrives in
  ``Cf-Access-Jwt-Assertion``; its claims ("Application token"): ``aud`` (a list of AUD tags),
  ``email``, ``exp``, ``iat``, ``nbf``, ``iss`` (``https://<team>.cloudflareaccess.com``),
  ``type`` ("app"), ``identity_nonce``, ``sub``, ``country``. No groups unless the team adds a
  custom claim.
* OIDC (OpenID Connect Core 1.0, RFC 7517): ``/.well-known/jwks.json`` with the same keys; ID
  and access tokens carry ``iss``, ``sub``, ``aud``, ``exp``, ``iat``, and here ``email`` and a
  ``groups`` claim (Keycloak writes group paths such as ``/sre``).

Knobs: ``down`` answers 503 (an outage of the key endpoint), ``rotate()`` publishes a new key,
``hits`` counts key-set fetches (to prove an unknown kid refetches once, not on every request).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class SigningKey:
    def __init__(self) -> None:
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public = self.private.public_key()
        der = self.public.public_bytes(serialization.Encoding.DER,
                                       serialization.PublicFormat.SubjectPublicKeyInfo)
        self.kid = hashlib.sha256(der).hexdigest()  # Access's kids are 64-hex digests
        self.public_pem = self.public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def jwk(self) -> dict:
        numbers = self.public.public_numbers()
        return {"kid": self.kid, "kty": "RSA", "alg": "RS256", "use": "sig",
                "e": _b64(numbers.e.to_bytes(3, "big")),
                "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big"))}

    def certificate(self) -> str:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test.cloudflareaccess.com")])
        now = dt.datetime.now(dt.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(self.public).serial_number(x509.random_serial_number())
                .not_valid_before(now - dt.timedelta(days=1))
                .not_valid_after(now + dt.timedelta(days=42))
                .sign(self.private, hashes.SHA256()))
        return cert.public_bytes(serialization.Encoding.PEM).decode()


class IdentityProvider:
    def __init__(self, team: str = "acme") -> None:
        self.team = team
        self.keys = [SigningKey()]
        self.down = False
        self.hits = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # Lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> IdentityProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def access_certs_url(self) -> str:
        return f"{self.url}/cdn-cgi/access/certs"

    @property
    def oidc_jwks_url(self) -> str:
        return f"{self.url}/.well-known/jwks.json"

    @property
    def access_issuer(self) -> str:
        return f"https://{self.team}.cloudflareaccess.com"

    oidc_issuer = "https://sso.example.com/realms/eng"

    def rotate(self) -> SigningKey:
        """A new current key; the previous one stays listed (Access keeps it 7 days)."""
        self.keys = [SigningKey(), self.keys[0]]
        return self.keys[0]

    def certs(self) -> dict:
        current = self.keys[0]
        return {
            "keys": [k.jwk() for k in self.keys],
            "public_cert": {"kid": current.kid, "cert": current.certificate()},
            "public_certs": [{"kid": k.kid, "cert": k.certificate()} for k in self.keys],
        }

    # Tokens ----------------------------------------------------------------------------------
    def access_token(self, email: str, aud: str, *, ttl: int = 3600, key: SigningKey | None = None,
                     **claims) -> str:
        now = int(time.time())
        body = {"aud": [aud], "email": email, "exp": now + ttl, "iat": now, "nbf": now,
                "iss": self.access_issuer, "type": "app", "identity_nonce": uuid.uuid4().hex,
                "sub": str(uuid.uuid4()), "country": "GB", **claims}
        return self.sign(body, key=key)

    def oidc_token(self, email: str, aud: str, *, groups: list | None = None, ttl: int = 3600,
                   **claims) -> str:
        now = int(time.time())
        body = {"iss": self.oidc_issuer, "sub": str(uuid.uuid4()), "aud": aud, "exp": now + ttl,
                "iat": now, "email": email, **claims}
        if groups is not None:
            body["groups"] = groups
        return self.sign(body)

    def sign(self, claims: dict, *, key: SigningKey | None = None, kid: str | None = None) -> str:
        key = key or self.keys[0]
        return jwt.encode(claims, key.private, algorithm="RS256",
                          headers={"kid": kid or key.kid})

    def unsigned(self, claims: dict) -> str:
        """``alg: none``: a token that claims it needs no signature."""
        header = {"alg": "none", "typ": "JWT", "kid": self.keys[0].kid}
        return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}."

    def hs256_with_public_key(self, claims: dict) -> str:
        """The key-confusion attack: HMAC-signed with the RSA public key as the secret, which a
        verifier that lets the token choose its algorithm would accept."""
        key = self.keys[0]
        header = {"alg": "HS256", "typ": "JWT", "kid": key.kid}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        mac = hmac.new(key.public_pem, signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{_b64(mac)}"

    # HTTP -------------------------------------------------------------------------------------
    def _handler(self):
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                if self.path not in ("/cdn-cgi/access/certs", "/.well-known/jwks.json"):
                    self.send_error(404)
                    return
                provider.hits += 1
                if provider.down:
                    self.send_error(503, "Service Unavailable")
                    return
                body = json.dumps(provider.certs()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        return Handler
