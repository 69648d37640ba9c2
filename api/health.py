"""``/healthz``: liveness for anyone, and for admins the state of what the service stands on;
``/readyz``: readiness, while a fresh server loads its parts (``api/startup.py``).

The public answer is ``{"status": "ok"}`` from any process that serves HTTP, and touches
nothing: load balancers and Kubernetes probes call it every few seconds, and a database
outage must not make every replica look dead (they are alive, answer 503 problem documents
meanwhile, and recover by themselves). The admin's answer checks each part on its own, so one
that is down is said, not turned into an error of the whole page: the database (which one,
reachable or not, each store's schema version), the vector store, and the counts that compare
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from citewise import __version__
from citewise.api.schemas import ResponseBody
from citewise.errors import CitewiseError
from citewise.ingest.consistency import check

if TYPE_CHECKING:
    from citewise.api.composition import Door, Services


class ProviderHealth(ResponseBody):
    """A model provider of the gateway, and its circuit breaker."""

    name: str
    model: str
    state: str = Field(description="The breaker: closed (calls go through), open (skipped "
                       "until retry_in_s) or half_open (one trial call).")
    consecutive_failures: int
    retry_in_s: float


class LlmHealth(ResponseBody):
    providers: list[ProviderHealth] = Field(description="In the order they are tried.")


class DatabaseHealth(ResponseBody):
    """Where the state is kept (catalog, keys, usage, conversations; with PostgreSQL also the
    run lock and the ingest jobs)."""

    backend: Literal["sqlite", "postgresql"] = Field(
        description="sqlite (the data folder's file, one machine) or postgresql "
                    "(CITEWISE_DATABASE_URL, shared by every replica).")
    reachable: bool
    schema_versions: dict[str, int] = Field(
        description="Each store's schema version live in the database (the migrations it "
                    "has had); {} when it cannot be reached.",
        examples=[{"catalog": 3, "identity": 2, "ingest_jobs": 1, "run_lock": 1}])
    problem: str | None = Field(default=None, description="Why it cannot be reached.")


class VectorStoreHealth(ResponseBody):
    kind: str = Field(description="embedded or server (Qdrant).")
    reachable: bool
    problem: str | None = Field(default=None, description="Why it cannot be reached.")


class Health(ResponseBody):
    """Liveness for anyone (only ``status``); the rest for admins (counts say how much
    restricted content exists)."""

    status: Literal["starting", "ok", "degraded", "failed"] = Field(
        description="starting: a fresh server is loading parts behind its open port (see "
                    "`loading`; /readyz answers 503 until they are loaded); ok; degraded: a "
                    "part is down or failed to load (see `problem`); failed: the embedding "
                    "model failed to load and the server is stopping (exit status 1).")
    loading: list[str] | None = Field(
        default=None, description="While starting: the parts still loading, in order.",
        examples=[["embedding model", "start-up checks", "parsers"]])
    problem: str | None = Field(default=None, description="What is wrong, when degraded.")
    version: str | None = None
    index: str | None = Field(default=None, description="embedded, server (a Qdrant "
                                 "server) or pgvector.")
    blob_store: str | None = Field(default=None, description="local or s3.")
    answers: Literal["llm", "extractive"] | None = None
    llm: LlmHealth | None = Field(default=None, description="With model providers.")
    identity: list[str] | None = Field(default=None, description="How callers may sign in.")
    database: DatabaseHealth | None = None
    vector_store: VectorStoreHealth | None = None
    documents: int | None = Field(default=None, description="Left out while the database "
                                  "or the vector store cannot be reached (as are chunks, "
                                  "points and open_swaps).")
    chunks: int | None = None
    points: int | None = None
    open_swaps: int | None = None


class Ready(ResponseBody):
    """``/readyz`` once everything is loaded."""

    status: Literal["ok", "degraded"] = Field(
        description="degraded: a part that answers do not need failed to load (/healthz says "
                    "which, to admins); the server answers.")
    loading: list[str] | None = Field(
        default=None, description="Parts that requests do not need, still loading behind "
                                  "(torch's model for ingest runs, the parsers).")


def database_health(services: Services) -> dict[str, Any]:
    stores = services.stores
    try:
        versions = stores.versions()
    except CitewiseError as e:
        return {"backend": stores.backend, "reachable": False, "schema_versions": {},
                "problem": e.message}
    return {"backend": stores.backend, "reachable": True, "schema_versions": versions,
            "problem": None}


def vector_store_health(services: Services) -> dict[str, Any]:
    try:
        services.index.count()
    except CitewiseError as e:
        return {"kind": services.index_kind, "reachable": False, "problem": e.message}
    return {"kind": services.index_kind, "reachable": True, "problem": None}


def admin_health(services: Services, door: Door) -> dict[str, Any]:
    """The admin's ``/healthz``; never raises for a part that is down."""
    s = services
    database = database_health(s)
    # The live generation is read from the catalog: without the database, the index's own
    # state cannot be asked for either.
    vectors: dict[str, Any] = vector_store_health(s) if database["reachable"] else \
        {"kind": s.index_kind, "reachable": False,
         "problem": "not checked: the live index generation is read from the database"}
    try:
        identity = door.authenticator.methods or ["local"]
    except CitewiseError:
        identity = None  # the key store is in the database
    out: dict[str, Any] = {
        "version": __version__,
        "index": s.index_kind,
        "blob_store": s.settings.index.blob_store,
        "answers": "llm" if s.gateway is not None else "extractive",
        "llm": {"providers": s.gateway.health()} if s.gateway is not None else None,
        "identity": identity,
        "database": database,
        "vector_store": vectors,
    }
    down = [p for p in (database, vectors) if not p["reachable"]]
    if down:
        return {**out, "status": "degraded",
                "problem": "; ".join(str(p["problem"]) for p in down)}
    try:
        health = check(s.catalog, s.index)
        documents = s.catalog.count_documents()
    except CitewiseError as e:  # gone between the checks above and these reads
        return {**out, "status": "degraded", "problem": e.message}
    return {
        **out,
        "status": "ok" if health.ok else "degraded",
        "problem": health.problem(),
        "documents": documents,
        "chunks": health.catalog_chunks,
        "points": health.points,
        "open_swaps": health.open_swaps,
    }
