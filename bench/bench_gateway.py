"""What citewise adds to a model's time to first token, and how fast it relays a stream.

A model provider on loopback (tests/fakes/openai_provider.py, speaking the chat-completions
protocol) answers every request. Time to first token (TTFT) is measured to the first content
delta, four ways:

* the provider alone (an HTTP client streaming from it directly);
* through the gateway (``Gateway.stream``: routing, breaker, accounting);
* through citewise's HTTP API on a real uvicorn server: ``POST /v1/answer`` with
  ``stream: true`` and ``POST /v1/chat/completions`` with ``stream: true``. These include
  everything an answer does before the model is asked: identity, search, the abstention checks
  and choosing the sections the model reads.

Then throughput: a 2,000-chunk answer streamed through ``/v1/answer``, in events per second.

Then a full model outage: the primary provider answers 500, the secondary refuses connections;
once both breakers are open, how long ``/v1/answer`` (plain and streamed) takes to come back
with the extractive answer (it used to wait out the breakers: 57-60 s).

Then a model that streams token by token (``token_stream``): a multi-paragraph answer with a
list, in 4-character chunks a few milliseconds apart, through ``/v1/answer`` and
``/v1/chat/completions``: the time to the first ``delta`` (to the first content chunk), how
many deltas the reader gets for the provider's chunks, and whether every ``block`` event came
after the text it closes (the output guardrail used to hold text to a line or sentence end).

    .venv/bin/python bench/bench_gateway.py      # -> bench/results/gateway.{json,md}
    .venv/bin/python bench/bench_gateway.py --only token-stream   # that case alone, merged in
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402

from citewise.api.app import create_app  # noqa: E402
from citewise.api.composition import build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.gateway import Gateway  # noqa: E402
from citewise.gateway.provider import Provider, ProviderSpec  # noqa: E402
from citewise.gateway.settings import ProviderConfig  # noqa: E402
from citewise.ingest.jobs import run_source  # noqa: E402
from tests.fakes.openai_provider import OpenAIProvider, cite_first_passage  # noqa: E402
from tests.kb import folder_source, make_key, write_kb  # noqa: E402
from tests.live import LiveServer  # noqa: E402

N = 60
QUESTION = "how do I fail over the redis cache?"
MESSAGES = [{"role": "user", "content": "<<<passage 1 x>>>\nRedis\n<<<end passage 1 x>>>"}]


def stats(samples: list[float]) -> dict:
    samples = sorted(samples)
    return {"p50_ms": round(statistics.median(samples), 2),
            "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 2), "n": len(samples)}


def ttft_direct(provider: OpenAIProvider, client: httpx.Client) -> float:
    body = {"model": provider.model, "messages": MESSAGES, "stream": True}
    started = time.perf_counter()
    with client.stream("POST", f"{provider.base_url}/chat/completions", json=body) as resp:
        for line in resp.iter_lines():
            if line.startswith("data:") and '"content": "' in line and '"content": ""' not in line:
                return (time.perf_counter() - started) * 1000
    raise AssertionError("no token")


def ttft_gateway(gateway: Gateway) -> float:
    started = time.perf_counter()
    streamed = gateway.stream(MESSAGES)
    for _ in streamed:
        elapsed = (time.perf_counter() - started) * 1000
        streamed.close()
        return elapsed
    raise AssertionError("no token")


def ttft_http(client: httpx.Client, url: str, path: str, body: dict, headers: dict,
              marker: str) -> float:
    started = time.perf_counter()
    with client.stream("POST", f"{url}{path}", json=body, headers=headers, timeout=60) as resp:
        for line in resp.iter_lines():
            if marker in line:
                return (time.perf_counter() - started) * 1000
    raise AssertionError(f"no token from {path}")


def _closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def outage(tmp: Path, kb: Path, n: int = 10) -> dict:
    """Seconds per answer with every provider's breaker open (a 90 s deadline)."""
    failing = OpenAIProvider(model="down").start()
    failing.mode = "500"
    try:
        settings = Settings(
            data_dir=tmp / "outage", require_auth=True, answer_cache=False,
            rate_answer_per_minute=10**9, quota_answer_per_day=10**9, llm_deadline=90,
            llm_breaker_failures=1, llm_breaker_reset=300,
            llm_providers=[ProviderConfig(name="primary", base_url=failing.base_url,
                                          model="down"),
                           ProviderConfig(name="secondary", base_url=_closed_port(),
                                          model="down")])
        services = build_services(settings)
        run_source(services.pipeline, folder_source(kb), trigger="bench")
        headers = make_key(services, "outage", scopes="answer")
        with LiveServer(create_app(services=services), settings) as url, \
                httpx.Client(timeout=120) as client:
            body = {"question": QUESTION}
            client.post(f"{url}/v1/answer", json=body, headers=headers)  # opens both
            states = [p["state"] for p in services.gateway.health()]
            plain, streamed, modes = [], [], set()
            for _ in range(n):
                started = time.perf_counter()
                answer = client.post(f"{url}/v1/answer", json=body, headers=headers).json()
                plain.append((time.perf_counter() - started) * 1000)
                modes.add(answer["mode"])
                started = time.perf_counter()
                with client.stream("POST", f"{url}/v1/answer", json={**body, "stream": True},
                                   headers=headers) as resp:
                    for line in resp.iter_lines():
                        if line.startswith("event: done"):
                            break
                streamed.append((time.perf_counter() - started) * 1000)
        services.close()
    finally:
        failing.stop()
    return {"breakers": states, "answer_modes": sorted(modes), "answer": stats(plain),
            "answer_stream_to_done": stats(streamed)}


TOKEN_REPLY = (
    "Fail over the Redis cache by promoting the replica with the smallest lag [1]. Check that "
    "replication has caught up before you switch, or the last writes are lost [1].\n\n"
    "1. Run a manual Sentinel failover: `redis-cli -p 26379 sentinel failover cache-main` [1]\n"
    "2. Restart the checkout pods so they reconnect to the new primary [1]\n"
    "3. Watch the hit rate on the cache dashboard until it is back above 80% [1]\n\n"
    "If the old primary comes back, Sentinel makes it a replica; leave it out of traffic until "
    "it has resynchronised [1].")
TOKEN_CHARS, TOKEN_DELAY_S, TOKEN_N = 4, 0.005, 10


def _read_stream(client: httpx.Client, url: str, path: str, body: dict, headers: dict,
                 chat: bool) -> dict:
    """First-delta time, delta count, and blocks sent before their text, for one request."""
    started = time.perf_counter()
    first, deltas, text, early_blocks, name = None, 0, "", 0, None
    with client.stream("POST", f"{url}{path}", json=body, headers=headers, timeout=60) as resp:
        for line in resp.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
                continue
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            data = json.loads(line.split(":", 1)[1])
            if chat:
                choices = data.get("choices") or [{}]
                piece = choices[0].get("delta", {}).get("content")
                if not piece or choices[0].get("finish_reason"):
                    continue
            elif name == "delta":
                piece = data["text"]
            else:
                if name == "block":  # its text must have arrived: its last line, at least
                    block_text = data["block"].get("text") or ""
                    tail = block_text.strip().split("\n")[-1][-20:]
                    early_blocks += tail not in text
                continue
            first = first or time.perf_counter()
            deltas += 1
            text += piece
    return {"first_delta_ms": (first - started) * 1000, "deltas": deltas,
            "blocks_before_text": early_blocks}


def token_stream(provider: OpenAIProvider, client: httpx.Client, url: str,
                 headers: dict) -> dict:
    """A provider streaming token by token, read through both doors."""
    provider.reply, provider.mode = TOKEN_REPLY, "slow"
    provider.chunk_chars, provider.delay_s = TOKEN_CHARS, TOKEN_DELAY_S
    chunks = -(-len(TOKEN_REPLY) // TOKEN_CHARS)
    headers = {**headers, "Cache-Control": "no-cache"}  # every answer from the model
    try:
        out = {"provider_chunks": chunks, "chunk_chars": TOKEN_CHARS,
               "delay_ms": TOKEN_DELAY_S * 1000,
               "provider_first_token": stats([ttft_direct(provider, client)
                                              for _ in range(TOKEN_N)])}
        answer_body = {"question": QUESTION, "stream": True}
        chat_body = {"model": "citewise", "stream": True,
                     "messages": [{"role": "user", "content": QUESTION}]}
        for door, path, body, chat in (("answer", "/v1/answer", answer_body, False),
                                       ("chat_completions", "/v1/chat/completions", chat_body,
                                        True)):
            runs = [_read_stream(client, url, path, body, headers, chat)
                    for _ in range(TOKEN_N)]
            out[door] = {"first_delta": stats([r["first_delta_ms"] for r in runs]),
                         "deltas_p50": statistics.median(r["deltas"] for r in runs),
                         "blocks_before_text": sum(r["blocks_before_text"] for r in runs)}
    finally:
        provider.reply, provider.mode, provider.chunk_chars = cite_first_passage, "ok", 8
    return out


def _serve(provider: OpenAIProvider, tmp: Path):
    kb = write_kb(tmp / "kb")
    # The answer cache off: every answer is the model's (a cached one is a replay, which
    # measured the cache, not the gateway: 7 ms "time to first token", 3 "deltas").
    settings = Settings(
        data_dir=tmp / "data", require_auth=True, answer_cache=False,
        rate_answer_per_minute=10**9, quota_answer_per_day=10**9,
        llm_providers=[ProviderConfig(name="loop", base_url=provider.base_url,
                                      model=provider.model)])
    services = build_services(settings)
    run_source(services.pipeline, folder_source(kb), trigger="bench")
    return kb, settings, services


def only_token_stream(out_dir: Path) -> None:
    """The token-by-token case alone, merged into the stored results."""
    provider = OpenAIProvider(model="bench-model").start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _, settings, services = _serve(provider, Path(tmp))
            headers = make_key(services, "bench", scopes="answer")
            with LiveServer(create_app(services=services), settings) as url, \
                    httpx.Client() as client:
                for _ in range(3):  # warm up: model, caches, connections
                    ttft_http(client, url, "/v1/answer", {"question": QUESTION, "stream": True},
                              headers, "event: delta")
                case = token_stream(provider, client, url, headers)
            services.close()
    finally:
        provider.stop()
    path = out_dir / "gateway.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    result["token_stream"] = {**case, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                            time.gmtime())}
    write_results(out_dir, result)


def main() -> None:
    out_dir = ROOT / "bench" / "results"
    if "--only" in sys.argv:
        if sys.argv[sys.argv.index("--only") + 1:][:1] != ["token-stream"]:
            raise SystemExit("--only takes: token-stream")
        only_token_stream(out_dir)
        return
    provider = OpenAIProvider(model="bench-model").start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            kb, settings, services = _serve(provider, Path(tmp))
            headers = make_key(services, "bench", scopes="answer")
            gateway = Gateway([Provider(ProviderSpec(name="loop", base_url=provider.base_url,
                                                     model=provider.model))])
            app = create_app(services=services)
            with LiveServer(app, settings) as url, httpx.Client() as client:
                answer_body = {"question": QUESTION, "stream": True}
                chat_body = {"model": "citewise", "stream": True,
                             "messages": [{"role": "user", "content": QUESTION}]}
                for _ in range(5):  # warm up: model, caches, connections
                    ttft_direct(provider, client), ttft_gateway(gateway)
                    ttft_http(client, url, "/v1/answer", answer_body, headers, "event: delta")
                direct = stats([ttft_direct(provider, client) for _ in range(N)])
                via_gateway = stats([ttft_gateway(gateway) for _ in range(N)])
                via_answer = stats([ttft_http(client, url, "/v1/answer", answer_body, headers,
                                              "event: delta") for _ in range(N)])
                via_chat = stats([ttft_http(client, url, "/v1/chat/completions", chat_body,
                                            headers, '"content":"R') for _ in range(N)])
                # Throughput: one long answer, 2,000 chunks of 4 characters.
                provider.reply = lambda body: "ok [1] " * 1143  # 8,001 characters
                provider.chunk_chars = 4
                started = time.perf_counter()
                deltas = 0
                first = last = None
                with client.stream("POST", f"{url}/v1/answer", json=answer_body,
                                   headers=headers, timeout=120) as resp:
                    for line in resp.iter_lines():
                        if line.startswith("event: delta"):
                            deltas += 1
                            now = time.perf_counter()
                            first = first or now
                            last = now
                throughput = {"delta_events": deltas,
                              "seconds": round(last - first, 3),
                              "events_per_s": round(deltas / (last - first), 1),
                              "total_s": round(time.perf_counter() - started, 3)}
                tokens = token_stream(provider, client, url, headers)
            gateway.close()
            services.close()
            down = outage(Path(tmp), kb)
    finally:
        provider.stop()

    added = {"gateway": round(via_gateway["p50_ms"] - direct["p50_ms"], 2),
             "answer_stream": round(via_answer["p50_ms"] - direct["p50_ms"], 2),
             "chat_completions_stream": round(via_chat["p50_ms"] - direct["p50_ms"], 2)}
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result = {"when": when,
              "machine": f"{platform.machine()}, {platform.python_version()}, "
                         f"{os.cpu_count()} cores",
              "ttft_provider_direct": direct, "ttft_gateway": via_gateway,
              "ttft_answer_stream": via_answer, "ttft_chat_completions_stream": via_chat,
              "added_ttft_p50_ms": added, "stream_throughput": throughput,
              "every_breaker_open": down, "token_stream": {**tokens, "when": when}}
    write_results(out_dir, result)


def write_results(out_dir: Path, result: dict) -> None:
    """gateway.json, and gateway.md written from it (a case run alone keeps the others)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gateway.json").write_text(json.dumps(result, indent=2) + "\n")
    direct, via_gateway = result["ttft_provider_direct"], result["ttft_gateway"]
    via_answer, via_chat = result["ttft_answer_stream"], result["ttft_chat_completions_stream"]
    added, throughput = result["added_ttft_p50_ms"], result["stream_throughput"]
    md = [
        "# Model gateway: added time to first token, and stream throughput",
        "",
        f"{result['when']}, {result['machine']}, {N} requests per case, a chat-completions "
        "provider on loopback (`bench/bench_gateway.py`). Added = p50 minus the provider's own "
        "p50. The HTTP rows include the whole answer path before the model is asked (API key, "
        "rate limit, hybrid search, abstention checks, choosing the sections to send).",
        "",
        "| time to first token | p50 ms | p95 ms | added p50 ms |",
        "|---|---:|---:|---:|",
        f"| provider alone | {direct['p50_ms']} | {direct['p95_ms']} | - |",
        f"| through the gateway | {via_gateway['p50_ms']} | {via_gateway['p95_ms']} | "
        f"{added['gateway']} |",
        f"| `POST /v1/answer` stream | {via_answer['p50_ms']} | {via_answer['p95_ms']} | "
        f"{added['answer_stream']} |",
        f"| `POST /v1/chat/completions` stream | {via_chat['p50_ms']} | {via_chat['p95_ms']} | "
        f"{added['chat_completions_stream']} |",
        "",
        f"Throughput: {throughput['delta_events']} `delta` events in {throughput['seconds']} s "
        f"= **{throughput['events_per_s']} events/s** through `/v1/answer` (SSE, one event per "
        "provider chunk). Target: added TTFT <= 30 ms p50.",
        "",
    ]
    down = result.get("every_breaker_open")
    if down:
        md += [
            "A full model outage (primary answering 500, secondary refusing connections, both "
            f"breakers {'/'.join(down['breakers'])}, deadline 90 s): `POST /v1/answer` came back "
            f"({'/'.join(down['answer_modes'])}) in p50 {down['answer']['p50_ms']} ms, p95 "
            f"{down['answer']['p95_ms']} ms; streamed, `done` arrived in p50 "
            f"{down['answer_stream_to_done']['p50_ms']} ms, p95 "
            f"{down['answer_stream_to_done']['p95_ms']} ms ({down['answer']['n']} requests "
            "each). Before the fix the router waited out the open breakers: the probe of issue "
            "37 measured 57-60 s per answer on main of 2026-12-05, and this case's gateway test "
            "(`test_with_every_breaker_open_the_request_gives_up_at_once`) ran 91 s there.",
            "",
        ]
    tokens = result.get("token_stream")
    if tokens:
        md += [
            "## A model streaming token by token",
            "",
            f"{tokens['when']}: a {len(TOKEN_REPLY)}-character answer (two paragraphs and a "
            f"three-step list) in {tokens['provider_chunks']} chunks of "
            f"{tokens['chunk_chars']} characters, {tokens['delay_ms']:g} ms apart; "
            f"{TOKEN_N} requests per door. The provider's own first token: p50 "
            f"{tokens['provider_first_token']['p50_ms']} ms. First delta = from sending the "
            "request to the first text (search included).",
            "",
            "| door | first delta p50 ms | p95 ms | deltas (p50) | blocks sent before their "
            "text |",
            "|---|---:|---:|---:|---:|",
        ]
        for door, name in (("answer", "`POST /v1/answer`"),
                           ("chat_completions", "`POST /v1/chat/completions`")):
            d = tokens[door]
            md.append(f"| {name} | {d['first_delta']['p50_ms']} | {d['first_delta']['p95_ms']}"
                      f" | {d['deltas_p50']:g} | {d['blocks_before_text']} |")
        md += ["", "\n\n".join(tokens.get("notes", [])), ""]
    (out_dir / "gateway.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
