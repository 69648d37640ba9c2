"""Ingest runs started over HTTP: the cron and `citewise ingest` hand their runs to the server."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from citewise.api.auth import caller
from citewise.api.identity.caller import Caller
from citewise.api.openapi import problems
from citewise.api.reload import with_stale_config
from citewise.api.schemas import IngestRequest, ResponseBody
from citewise.errors import NotFoundError
from citewise.ingest.repair import verify_index
from citewise.ingest.sources import resolve_sources

# SQLite's integer range: a larger run id is a client error, not an overflow.
MAX_ID = 2**63 - 1

# The front door requires the ingest scope for every route here (frontdoor.RULES).
router = APIRouter(prefix="/v1/ingest", tags=["ingest"])


class DocumentFailure(ResponseBody):
    external_id: str = Field(description="The document's id in its source.")
    error: str


class RecordedError(ResponseBody):
    external_id: str | None = Field(description="The document's id in its source; null for "
                                    "a problem of the run beyond one document, or a warning.")
    error: str


class RunReportView(ResponseBody):
    """One source's run within a job, with its counts (``index.catalog.RunCounts``)."""

    run_id: int
    source: str
    status: Literal["succeeded", "partial", "failed", "interrupted"]
    seconds: float
    message: str | None
    summary: str = Field(description="The run in one line, as the server's log says it.")
    errors: list[DocumentFailure]
    run_errors: list[str] = Field(description="Problems beyond one document (a space that "
                                  "cannot be listed).")
    warnings: list[str]
    seen: int
    added: int
    updated: int
    unchanged: int
    deleted: int
    failed: int
    chunks_written: int
    chunks_embedded: int


class JobView(ResponseBody):
    """An ingest job: its sources, run one after the other by this server, or, with a shared
    database, by whichever worker took it (every replica reads the same job)."""

    id: str
    sources: list[str]
    status: Literal["queued", "running", "done", "failed"] = Field(
        description="queued (waiting for a worker, or for the run lock), running, done, or "
                    "failed (`message` says why: a source that failed, or a worker that died "
                    "mid-run).")
    current: str | None = Field(description="The source being read now.")
    counts: dict[str, int] = Field(description="The current source's counts so far (seen, "
                                   "added, updated, ...); {} before its first.")
    reports: list[RunReportView] = Field(description="Each finished source's run.")
    message: str | None = Field(description="Why the job failed.")


class JobList(ResponseBody):
    jobs: list[JobView]


class RunView(ResponseBody):
    """An ingest run as the catalog records it (any process's: the server's, the CLI's)."""

    id: int
    source: str
    trigger: str = Field(examples=["api", "schedule", "cli"])
    status: str = Field(description="running, succeeded, partial (some documents failed), "
                        "failed or interrupted.")
    started_at: str
    finished_at: str | None
    seen: int
    added: int
    updated: int
    unchanged: int
    deleted: int
    failed: int
    chunks_written: int
    chunks_embedded: int
    message: str | None
    host: str | None = Field(description="The machine of the process that ran it.")
    pid: int | None = Field(description="That process's id.")


class RunList(ResponseBody):
    runs: list[RunView]


class RunDetail(RunView):
    errors: list[RecordedError] = Field(description="Per document, in the order they "
                                          "happened.")


@router.post("/jobs", status_code=202, response_model=JobView, summary="Start an ingest job",
             responses=problems({
                 404: "No source of that name is declared (it says so when the server's "
                      "config is older than its file: reload it).",
                 409: "Another ingest job is queued or running, or another run (a cron, a "
                      "repair, a backup) holds the run lock: one at a time.",
                 502: "The source could not be read."}))
def start(body: IngestRequest, request: Request,
          who: Annotated[Caller, Depends(caller)]) -> dict:
    """Runs in the background, one job at a time; poll `GET /v1/ingest/jobs/{id}` (on any
    replica, with a shared database)."""
    services = request.app.state.services
    settings = services.settings  # read once: a config reload may swap it meanwhile
    try:
        sources = resolve_sources(
            settings.sources,
            services.sources,
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


@router.get("/jobs/{job_id}", response_model=JobView,
            summary="An ingest job's progress and results",
            responses=problems({404: "No job of that id (a server without a shared database "
                                     "forgets its jobs when it restarts; their runs stay in "
                                     "/v1/ingest/runs)."}))
def get_job(job_id: Annotated[str, Path(max_length=64)], request: Request) -> dict:
    return request.app.state.services.jobs.get(job_id).to_dict()


@router.get("/jobs", response_model=JobList,
            summary="Recent ingest jobs (this server's, or the shared database's)")
def list_jobs(request: Request) -> dict:
    return {"jobs": [j.to_dict() for j in request.app.state.services.jobs.jobs()]}


@router.get("/runs", response_model=RunList, summary="Recent ingest runs (all processes)")
def list_runs(
    request: Request,
    source: Annotated[str | None, Query(max_length=63)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
) -> dict:
    return {"runs": request.app.state.services.sources.list_runs(source, limit)}


@router.get("/runs/{run_id}", response_model=RunDetail,
            summary="One ingest run with its per-document errors",
            responses=problems({404: "No ingest run of that id."}))
def get_run(run_id: Annotated[int, Path(ge=1, le=MAX_ID)], request: Request) -> dict:
    run = request.app.state.services.sources.get_run(run_id)
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


class FindingGroupView(ResponseBody):
    """The problems of one kind (``ingest.consistency.FindingGroup``)."""

    kind: str = Field(examples=["missing_point", "orphan_blob"])
    count: int
    documents: int = Field(description="The documents they concern.")
    headline: str
    examples: list[str] = Field(description="All of them when few, else one each of the "
                                "documents with the most.")


class RepairView(ResponseBody):
    """What a repair did (``ingest.repair.RepairReport``)."""

    found: list[str] = Field(description="The problems before the repair.")
    found_summary: list[FindingGroupView]
    swaps_finished: int
    points_deleted: int
    documents_rebuilt: int
    points_written: int
    blobs_deleted: int
    marked_for_reread: list[str] = Field(description="Documents whose stored copy is gone: "
                                         "their source's next run reads them again.")
    made_private: int = Field(description="Files and folders of the data folder made "
                              "private.")
    remaining: list[str]


class VerifyAnswer(ResponseBody):
    ok: bool
    problems: list[str] = Field(description="Every disagreement (after a repair: what "
                                "remains).")
    summary: list[FindingGroupView]
    lost_catalog: str | None = Field(description="Why a repair would refuse: the catalog "
                                     "looks lost, and what to do.")
    plan: list[str] = Field(description="What a repair would do, and what it cannot.")
    repair: RepairView | None = Field(description="With `repair`: what was done.")


@router.post("/verify", response_model=VerifyAnswer,
             summary="Check the index and the blob store against the catalog",
             responses=problems({
                 409: "An ingest run holds the run lock, or the catalog looks lost and "
                      "`force` is not set.",
                 507: "With `repair`: the data folder's disk is full."}))
def verify(body: VerifyRequest, request: Request,
           who: Annotated[Caller, Depends(caller)]) -> dict:
    """Every live chunk has exactly one point of the live version with the catalog's payload
    and readers; no stray points, blobs or rows; no swap left open. `problems` lists what
    disagrees (every one) and `summary` the same by kind (a count, the documents touched, a
    few examples); with `repair`, `repair` says what was done and `problems` what remains. Takes
    the ingest run lock: while a run goes on, answers 409."""
    services = request.app.state.services
    what = "verify --repair" if body.repair else "verify"
    with services.run_lock.held(f"{what} (server, {who.principal})"):
        result = verify_index(services.pipeline, fix=body.repair, force=body.force)
    if body.repair:
        request.app.state.door.audit.record(
            "index.repair", actor=who.principal, key=who.key, target="index",
            detail={k: v for k, v in result["repair"].items() if k != "found"},
            client=request.client.host if request.client else None,
            request_id=request.state.request_id)
    return result
