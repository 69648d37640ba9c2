"""What the front door costs per request: authentication, scope check, rate limit and usage.

The same trivial route is called in-process (ASGI, no network) without the front door and
through it with each kind of caller: an API key, a Cloudflare Access token (RS256, key set
cached from the loopback identity provider of tests/fakes) and local mode. The overhead is the
difference of medians. Then the parts alone: verifying a key, verifying a JWT.

    .venv/bin/python bench/bench_frontdoor.py      # -> bench/results/frontdoor.{json,md}
"""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from starlette.applications import Starlette  # noqa: E402
from starlette.datastructures import Headers  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from citewise.api.composition import build_door, build_stores  # noqa: E402
from citewise.api.frontdoor import FrontDoor  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from tests.fakes.identity_provider import IdentityProvider  # noqa: E402

N = 3000
AUD = "bench-aud"


def _app(door, with_front_door: bool):
    async def search(request):
        return JSONResponse({"results": []})

    app = Starlette(routes=[Route("/v1/search", search, methods=["POST"])])
    app.state.door = door
    app.state.services = None
    if with_front_door:
        app.add_middleware(FrontDoor)
    return app


async def _call(app, headers: list[tuple[bytes, bytes]]) -> float:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/search", "raw_path": b"/v1/search",
             "query_string": b"", "root_path": "", "headers": headers,
             "client": ("10.0.0.5", 40000), "server": ("127.0.0.1", 8000)}
    scope["app"] = app

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            assert message["status"] == 200, message

    started = time.perf_counter()
    await app(scope, receive, send)
    return (time.perf_counter() - started) * 1000


def _timed(app, headers, n=N) -> dict:
    async def run():
        for _ in range(200):  # warm up
            await _call(app, headers)
        return [await _call(app, headers) for _ in range(n)]

    samples = sorted(asyncio.run(run()))
    return {"p50_ms": round(statistics.median(samples), 4),
            "p95_ms": round(samples[int(0.95 * len(samples))], 4)}


def main() -> None:
    out_dir = ROOT / "bench" / "results"
    with tempfile.TemporaryDirectory() as tmp, IdentityProvider() as idp:
        stores = build_stores(Settings(data_dir=Path(tmp)))
        settings = Settings(data_dir=Path(tmp), require_auth=True,
                            access_team_domain=idp.access_issuer, access_aud=AUD,
                            access_jwks_url=idp.access_certs_url,
                            rate_search_per_minute=10**9, quota_search_per_day=10**9)
        door = build_door(settings, stores)
        _, secret = door.keys.create("bench", "search")
        token = idp.access_token("dana@example.com", AUD)
        local_door = build_door(Settings(data_dir=Path(tmp), rate_search_per_minute=10**9), stores)

        bare = _timed(_app(door, False), [])
        with_key = _timed(_app(door, True), [(b"authorization", f"Bearer {secret}".encode())])
        with_jwt = _timed(_app(door, True), [(b"cf-access-jwt-assertion", token.encode())])
        local = _timed(_app(local_door, True), [])
        door.usage.flush()

        headers_key = Headers(raw=[(b"authorization", f"Bearer {secret}".encode())])
        headers_jwt = Headers(raw=[(b"cf-access-jwt-assertion", token.encode())])

        def parts(fn, n=N):
            samples = []
            for _ in range(n):
                t = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - t) * 1000)
            samples.sort()
            return round(statistics.median(samples), 4)

        key_verify = parts(lambda: door.authenticator.authenticate(headers_key, "10.0.0.5"))
        jwt_verify = parts(lambda: door.authenticator.authenticate(headers_jwt, "10.0.0.5"))
        stores.close()

    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "requests_per_case": N,
        "bare_route": bare,
        "front_door_api_key": with_key,
        "front_door_access_jwt": with_jwt,
        "front_door_local_mode": local,
        "overhead_p50_ms": {
            "api_key": round(with_key["p50_ms"] - bare["p50_ms"], 4),
            "access_jwt": round(with_jwt["p50_ms"] - bare["p50_ms"], 4),
            "local_mode": round(local["p50_ms"] - bare["p50_ms"], 4),
        },
        "authenticate_only_p50_ms": {"api_key": key_verify, "access_jwt": jwt_verify},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "frontdoor.json").write_text(json.dumps(result, indent=2) + "\n")
    o = result["overhead_p50_ms"]
    md = [
        "# Front door overhead per request",
        "",
        f"{result['when']}, {result['machine']}, {N} in-process ASGI requests per case "
        "(`bench/bench_frontdoor.py`). Overhead = p50 through the front door minus p50 of the "
        "same route without it; it covers the request id, authentication, the scope check, two "
        "rate-limit buckets (per minute and per day), usage recording and the security headers.",
        "",
        "| caller | p50 ms | p95 ms | overhead p50 ms |",
        "|---|---:|---:|---:|",
        f"| no front door | {bare['p50_ms']} | {bare['p95_ms']} | - |",
        f"| API key | {with_key['p50_ms']} | {with_key['p95_ms']} | {o['api_key']} |",
        f"| Cloudflare Access JWT (RS256) | {with_jwt['p50_ms']} | {with_jwt['p95_ms']} | "
        f"{o['access_jwt']} |",
        f"| local mode (no credential) | {local['p50_ms']} | {local['p95_ms']} | "
        f"{o['local_mode']} |",
        "",
        f"`Authenticator.authenticate` alone, p50: API key {key_verify} ms, "
        f"Access JWT {jwt_verify} ms. Target: overhead <= 2 ms.",
        "",
    ]
    (out_dir / "frontdoor.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
