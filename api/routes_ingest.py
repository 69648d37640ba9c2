"""Ingest runs started over HTTP: the cron and `citewise ingest` hand their runs to the server."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from citewise.api.auth import caller
from citewise.api.identity.caller import Caller
from citewise.api.openapi import problem_response
from citewise.api.reload import with_stale_config
from citewise.api.schemas import IngestRequest
from citewise.errors import NotFoundError
from citewise.ingest.repair import verify_index
from citewise.ingest.sources import resolve_sources

# SQLite's integer range: a larger run id is a client error, not an overflow.
MAX_ID = 2**63 - 1

# The front door requires the ingest scope for every route here (frontdoor.RULES).
router = APIRouter(prefix="/v1/ingest", tags=["ingest"])


@router.post("/jobs", status_code=202, summary="Start an ingest job",
             responses={404: problem_response("No source of that name is declared (it says "
                                              "so when the server's config is older than its "
                                              "file: reload it)."),
                        409: problem_response("Another ingest job is running (one at a time)."),
                        502: problem_response("The source could not be read.")})
def start(body: IngestRequest, request: Request,
          who: Annotated[Caller, Depends(caller)]) -> dict:
    """Runs in the background, one job at a time; poll `GET /v1/ingest/jobs/{id}`."""
    services = request.app.state.services
    settings = services.settings  # read once: a config reload may swap it meanwhile
    try:
        sources = resolve_sources(
            settings.sources,
            services.catalog,
            data_dir=settings.data_dir,
            default_readers=settings.default_readers,
            path=body.path,
            name=body.name,
            source=body.source,
            all_sources=body.all,
            readers=body.readers,
            # The operator's own CLI may name any folder; other callers only allowed ones.
            allowed=None if who.method == "operator" else settings.ingest.ingest_allowed_paths,
        )
    except NotFoundError as e:
        raise with_stale_config(e, settings) from None
    job = services.jobs.submit(sources, trigger="api", force=body.force)
    request.app.state.door.audit.record(
        "ingest.start", actor=who.principal, key=who.key, target=job.id,
        detail={"sources": [s.name for s in sources], "force": body.force},
        client=request.client.host if request.client else None,
        request_id=request.state.request_id)
    return job.to_dict()


@router.get("/jobs/{job_id}", summary="An ingest job's progress and results")
def get_job(job_id: Annotated[str, Path(max_length=64)], request: Request) -> dict:
    return request.app.state.services.jobs.get(job_id).to_dict()


@router.get("/jobs", summary="Recent ingest jobs of this server")
def list_jobs(request: Request) -> dict:
    return {"jobs": [j.to_dict() for j in request.app.state.services.jobs.jobs()]}


@router.get("/runs", summary="Recent ingest runs (all processes)")
def list_runs(
    request: Request,
    source: Annotated[str | None, Query(max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
) -> dict:
    return {"runs": request.app.state.services.catalog.list_runs(source, limit)}


@router.get("/runs/{run_id}", summary="One ingest run with its per-document errors")
def get_run(run_id: Annotated[int, Path(ge=1, le=MAX_ID)], request: Request) -> dict:
    run = request.app.state.services.catalog.get_run(run_id)
    if run is None:
        raise NotFoundError(f"no ingest run {run_id}")
    return run


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra={"examples": [{"repair": True}]})

    repair: bool = Field(default=False, description="Also repair what is found, from the "
                         "catalog and the stored blobs (the sources are not read).")
    force: bool = Field(default=False, description="With `repair`: delete the points and "
                        "blobs no document owns even when the catalog looks lost (most of "
                        "the index and blobs, a catalog of few documents); refused otherwise.")


@router.post("/verify", summary="Check the index and the blob store against the catalog",
             responses={409: problem_response("An ingest run holds the run lock, or the "
                                              "catalog looks lost and `force` is not set.")})
def verify(body: VerifyRequest, request: Request,
           who: Annotated[Caller, Depends(caller)]) -> dict:
    """Every live chunk has exactly one point of the live version with the catalog's payload
    and readers; no stray points, blobs or rows; no swap left open. `problems` lists what
    disagrees (every one) and `summary` the same by kind (a count, the documents touched, a
    few examples); with `repair`, `repair` says what was done and `problems` what remains. Takes
    the ingest run lock: while a run goes on, answers 409."""
    services = request.app.state.services
    what = "verify --repair" if body.repair else "verify"
    with services.jobs.run_lock.held(f"{what} (server, {who.principal})"):
        result = verify_index(services.pipeline, fix=body.repair, force=body.force)
    if body.repair:
        request.app.state.door.audit.record(
            "index.repair", actor=who.principal, key=who.key, target="index",
            detail={k: v for k, v in result["repair"].items() if k != "found"},
            client=request.client.host if request.client else None,
            request_id=request.state.request_id)
    return result
