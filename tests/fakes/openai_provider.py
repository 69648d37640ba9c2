"""A model provider on loopback that speaks the OpenAI chat-completions protocol, and misbehaves
on request: for the gateway's contract tests and the streaming benchmark.

Shapes, as documented in the API reference (platform.openai.com/docs/api-reference/chat) and as
vLLM, Ollama and Workers AI send them:

* ``POST /v1/chat/completions`` answers ``chat.completion`` (``choices[0].message.content``,
  ``finish_reason``, ``usage.prompt_tokens`` / ``completion_tokens`` / ``total_tokens``);
* with ``"stream": true``, ``text/event-stream`` of ``chat.completion.chunk`` objects: a first
  delta with ``role`` and empty content, content deltas, a last choice with ``finish_reason``
  and an empty delta, then, only when ``stream_options.include_usage`` was asked, a chunk with
  ``"choices": []`` and ``usage``, and finally ``data: [DONE]``. Some gateways interleave SSE
  comments (OpenRouter sends ``: OPENROUTER PROCESSING``), so the stream carries one;
* ``POST /v1/embeddings`` (OpenAI, TEI and vLLM alike): ``{"object": "list", "data": [{"object":
  "embedding", "index": i, "embedding": [...]}], "model", "usage": {"prompt_tokens",
  "total_tokens"}}``; rows are sent in reverse order here, since the reference only promises
  ``index``; the vectors come from ``embedder`` (a real model, so search works through it).
  ``"encoding_format": "base64"`` gets each vector as its float32 bytes, little-endian,
  base64-encoded (the reference; recorded in lm-sys/FastChat#2281); a value other than
  ``float`` or ``base64`` gets OpenAI's 400 "Invalid value for 'encoding_format' = md5.
  Supported values: ['float', 'base64']." (the same recording). ``embedding_encoding`` plays
  the other servers: ``"ignore"`` always sends numbers
  (runpod-workers/worker-infinity-embedding#30), ``"refuse_base64"`` answers base64 with a 400
  (christopherthompson81/LlamaCpp.Bindings#15), ``"refuse_vaguely"`` with a 400 that does not
  say why;
* errors: ``{"error": {"message", "type", "param", "code"}}``; a 429 carries ``Retry-After``
  (seconds) as OpenAI, Workers AI and vLLM behind a proxy send it.

Behaviour per request comes from ``script`` (consumed in order) or ``mode`` when it is empty:
``ok``, ``429``, ``500``, ``hang`` (answers after ``hang_s``), ``drop`` (a stream that stops
after a few chunks, without ``[DONE]``), ``drop_early`` (closes before the first chunk),
``malformed`` (a chunk that is not JSON), ``slow`` (one chunk every ``delay_s``).
``requests`` keeps every body received, so tests can check what the model was told;
``chunks_sent`` counts the content chunks of the latest stream as they go out.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _base64_floats(vector) -> str:
    """A vector as OpenAI sends it for ``"encoding_format": "base64"``: float32, little-endian."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *map(float, vector))).decode()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client that hangs up (a cancelled stream) is expected here, not an error."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def cite_first_passage(body: dict) -> str:
    """A reply that behaves like a good model: one sentence citing the first passage given."""
    user = body["messages"][-1]["content"]
    numbers = re.findall(r"<<<passage (\d+) ", user)
    n = numbers[0] if numbers else "1"
    return (f"Roll back the release first [{n}].\n\n1. Run the rollback [{n}]\n"
            f"2. Check the dashboards [{n}]")


class OpenAIProvider:
    def __init__(self, model: str = "llama-3.1-8b") -> None:
        self.model = model
        self.mode = "ok"
        self.script: list[str] = []
        self.reply = cite_first_passage  # str or function of the request body
        self.retry_after = "1"
        self.hang_s = 5.0
        self.delay_s = 0.05
        self.chunk_chars = 8
        self.send_usage = True
        self.requests: list[dict] = []
        self.embedder = None  # texts -> vectors, for /v1/embeddings
        self.embedding_encoding = "honour"  # "ignore", "refuse_base64", "refuse_vaguely"
        self.embedding_formats: list[str] = []  # the encoding_format each call asked for
        self.too_long: str | None = None  # a text holding this gets vLLM's context-length 400
        self.corrupt_base64 = False  # base64 rows cut short (a broken proxy, a bad server)
        self.embedding_batches: list[int] = []
        self.embedding_models: list[str] = []  # the model each /v1/embeddings call named
        self.modes_served: list[str] = []
        self.disconnected_after: int | None = None  # chunks sent before the client left
        self.chunks_sent = 0
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> OpenAIProvider:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next_mode(self) -> str:
        with self._lock:
            mode = self.script.pop(0) if self.script else self.mode
            self.modes_served.append(mode)
            return mode

    def _text(self, body: dict) -> str:
        return self.reply(body) if callable(self.reply) else self.reply

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _json(self, status: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, kind: str, code: str | None,
                       headers: dict | None = None) -> None:
                self._json(status, {"error": {"message": message, "type": kind, "param": None,
                                              "code": code}}, headers)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._json(200, {"object": "list", "data": [
                        {"id": fake.model, "object": "model", "created": 1721172741,
                         "owned_by": "vllm"}]})
                else:
                    self._error(404, "not found", "invalid_request_error", None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/") == "/v1/embeddings":
                    self._embeddings(body)
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._error(404, f"Unknown path {self.path}", "invalid_request_error", None)
                    return
                with fake._lock:
                    fake.requests.append(body)
                mode = fake._next_mode()
                if self._failed(mode):
                    return
                if mode == "hang":
                    time.sleep(fake.hang_s)
                text = fake._text(body)
                if not body.get("stream"):
                    if mode == "malformed":
                        data = b'{"id": "chatcmpl-1", "choices": ['
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    usage = {"prompt_tokens": 812, "completion_tokens": 37,
                             "total_tokens": 849}
                    out = {"id": "chatcmpl-abc123", "object": "chat.completion",
                           "created": int(time.time()), "model": fake.model,
                           "system_fingerprint": "fp_44709d6fcb",
                           "choices": [{"index": 0, "message": {"role": "assistant",
                                                                 "content": text},
                                        "logprobs": None, "finish_reason": "stop"}]}
                    if fake.send_usage:
                        out["usage"] = usage
                    self._json(200, out)
                    return
                self._stream(body, text, mode)

            def _failed(self, mode: str) -> bool:
                """Answers 429 or 500 as OpenAI does, when the mode says so."""
                if mode == "429":
                    self._error(429, "Rate limit reached for requests", "requests",
                                "rate_limit_exceeded", {"Retry-After": fake.retry_after})
                elif mode == "500":
                    self._error(500, "The server had an error while processing your request.",
                                "server_error", None)
                return mode in ("429", "500")

            def _embeddings(self, body: dict) -> None:
                if self._failed(fake._next_mode()):
                    return
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                fmt = body.get("encoding_format", "float")
                with fake._lock:
                    fake.embedding_formats.append(fmt)
                if fake.too_long and any(fake.too_long in t for t in texts):
                    # vLLM's answer to an input past the model's window (its OpenAI server's
                    # 400, type BadRequestError), whatever the encoding asked for.
                    self._error(400, "This model's maximum context length is 512 tokens. "
                                "However, you requested 913 tokens in the input for embedding "
                                "generation. Please reduce the length of the input.",
                                "BadRequestError", None)
                    return
                if fmt == "base64" and fake.embedding_encoding == "refuse_vaguely":
                    self._error(400, "Bad input", "invalid_request_error", None)
                    return
                if fmt not in ("float", "base64") or (
                        fmt == "base64" and fake.embedding_encoding == "refuse_base64"):
                    allowed = "['float']" if fake.embedding_encoding == "refuse_base64" \
                        else "['float', 'base64']"
                    self._error(400, f"Invalid value for 'encoding_format' = {fmt}. Supported "
                                f"values: {allowed}.", "invalid_request_error", None)
                    return
                with fake._lock:
                    fake.embedding_batches.append(len(texts))
                    fake.embedding_models.append(body["model"])
                vectors = fake.embedder(texts)
                as_base64 = fmt == "base64" and fake.embedding_encoding == "honour"
                rows = [{"object": "embedding", "index": i,
                         "embedding": _base64_floats(v) if as_base64 else [float(x) for x in v]}
                        for i, v in enumerate(vectors)]
                if as_base64 and fake.corrupt_base64:
                    for row in rows:
                        row["embedding"] = row["embedding"][:-3]
                tokens = sum(len(t.split()) for t in texts)
                self._json(200, {"object": "list", "data": rows[::-1], "model": body["model"],
                                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

            def _chunk(self, delta: dict, finish: str | None = None) -> dict:
                return {"id": "chatcmpl-abc123", "object": "chat.completion.chunk",
                        "created": int(time.time()), "model": fake.model,
                        "system_fingerprint": "fp_44709d6fcb",
                        "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish}]}

            def _send(self, raw: bytes) -> None:
                # chunked transfer encoding, as uvicorn and vLLM stream
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()

            def _event(self, obj: dict | str) -> None:
                data = obj if isinstance(obj, str) else json.dumps(obj)
                self._send(f"data: {data}\n\n".encode())

            def _stream(self, body: dict, text: str, mode: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if mode == "drop_early":
                    self.close_connection = True
                    return
                pieces = [text[i:i + fake.chunk_chars]
                          for i in range(0, len(text), fake.chunk_chars)]
                sent = fake.chunks_sent = 0
                try:
                    self._event(self._chunk({"role": "assistant", "content": ""}))
                    self._send(b": OPENROUTER PROCESSING\n\n")
                    for i, piece in enumerate(pieces):
                        if mode == "drop" and i == 3:
                            self.close_connection = True
                            return  # no terminating chunk: the client sees a broken body
                        if mode == "malformed" and i == 0:
                            self._event('{"choices": [{"delta": {"content": "Hel')
                            continue
                        if mode == "slow":
                            time.sleep(fake.delay_s)
                        self._event(self._chunk({"content": piece}))
                        sent = fake.chunks_sent = sent + 1
                    self._event(self._chunk({}, "stop"))
                    if (body.get("stream_options") or {}).get("include_usage") \
                            and fake.send_usage:
                        usage_chunk = self._chunk({})
                        usage_chunk["choices"] = []
                        usage_chunk["usage"] = {"prompt_tokens": 812,
                                                "completion_tokens": len(pieces),
                                                "total_tokens": 812 + len(pieces)}
                        self._event(usage_chunk)
                    self._event("[DONE]")
                    self._send(b"")
                except (BrokenPipeError, ConnectionResetError):
                    fake.disconnected_after = sent
                    self.close_connection = True

        return Handler
