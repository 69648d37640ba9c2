"""Prometheus metrics, served at ``GET /metrics``. Defined once here so every layer shares them."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

HTTP_REQUESTS = Counter(
    "citewise_http_requests_total", "HTTP requests served", ["method", "route", "status"]
)
HTTP_LATENCY = Histogram(
    "citewise_http_request_seconds", "HTTP request latency", ["method", "route"]
)
HTTP_IN_FLIGHT = Gauge("citewise_http_requests_in_flight", "HTTP requests being answered now")
SEARCH_LATENCY = Histogram(
    "citewise_search_seconds",
    "Time to run one search (embedding the query included)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
SEARCH_RANK_LATENCY = Histogram(
    "citewise_search_rank_seconds",
    "Time the learned second stage adds to one search (features and model; off = never seen)",
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05),
)
SEARCH_RETRIES = Counter(
    "citewise_search_retries_total",
    "Searches asked of the index again: a document swap committed while one ran (swap), the "
    "index generation switched under it (generation), or its page came back short of live "
    "hits (refill)",
    ["reason"],
)
for _reason in ("swap", "generation", "refill"):
    SEARCH_RETRIES.labels(_reason)  # exported at 0 from the start, as Prometheus advises
ANSWERS = Counter("citewise_answers_total", "Answers given", ["mode", "abstained"])
INGEST_DOCUMENTS = Counter(
    "citewise_ingest_documents_total", "Documents processed by ingest runs", ["source", "outcome"]
)
INGEST_CHUNKS_EMBEDDED = Counter(
    "citewise_ingest_chunks_embedded_total", "Chunks run through the embedding model"
)
INGEST_RUNS = Counter("citewise_ingest_runs_total", "Ingest runs finished", ["source", "status"])
INGEST_RUNNING = Gauge("citewise_ingest_running", "Ingest runs in progress")
INGEST_PAUSED = Counter(
    "citewise_ingest_paused_seconds_total",
    "Seconds ingest runs paused to leave the CPU to requests being served (CITEWISE_INGEST_YIELD)",
)
REQUESTS_BY_KEY = Counter(
    "citewise_requests_by_key_total", "API requests per API key (empty: no key), route and status",
    ["key", "route", "status"],
)
RATE_LIMITED = Counter(
    "citewise_rate_limited_total", "Requests refused by a rate limit or quota", ["rate_class"]
)
AUTH_REFUSED = Counter(
    "citewise_auth_refused_total", "Requests refused at the front door", ["status"]
)
LLM_SECONDS = Histogram(
    "citewise_llm_request_seconds", "Time of one model call, to its last token", ["provider"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80),
)
LLM_TTFT = Histogram(
    "citewise_llm_time_to_first_token_seconds", "Time to a streamed call's first token",
    ["provider"], buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
)
LLM_ERRORS = Counter(
    "citewise_llm_errors_total", "Failed model calls by provider and kind (timeout, connect, "
    "status, rate_limited, refused, malformed, dropped, busy)", ["provider", "kind"],
)
LLM_FAILOVERS = Counter(
    "citewise_llm_failovers_total", "Requests moved on from a provider after it failed",
    ["provider"],
)
LLM_TOKENS = Counter(
    "citewise_llm_tokens_total", "Model tokens by provider and direction (in, out)",
    ["provider", "direction"],
)
LLM_COST = Counter("citewise_llm_cost_total", "Model cost in the configured currency",
                   ["provider"])
LLM_BREAKER = Gauge(
    "citewise_llm_breaker_state", "Circuit breaker per provider: 0 closed, 1 half-open, 2 open",
    ["provider"],
)
CACHE_LOOKUPS = Counter("citewise_answer_cache_lookups_total", "Semantic cache lookups",
                        ["result"])
CACHE_DROPPED = Counter("citewise_answer_cache_dropped_total",
                        "Cache entries dropped: stale (a cited document changed) or evicted",
                        ["reason"])
CACHE_SAVED_TOKENS = Counter("citewise_answer_cache_saved_tokens_total",
                             "Model tokens not spent thanks to cache hits")
CACHE_ENTRIES = Gauge("citewise_answer_cache_entries", "Answers in the semantic cache")
GUARDRAIL_DECISIONS = Counter(
    "citewise_guardrail_decisions_total",
    "Guardrail decisions by policy, kind and action (block, flag, redact)",
    ["policy", "kind", "action"],
)
