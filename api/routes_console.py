"""The operator console's routes (``/v1/admin/...``): sources, usage, models and feedback
triage, read by the admin section of the page. The ``admin`` scope (the front door's rule for
``/v1/admin``), and every call in the audit log, reads included, as the other admin routes."""

from __future__ import annotations

import os
import socket
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Request

from citewise.api.auth import caller
from citewise.api.console import feedback as triage
from citewise.api.console.schemas import (
    Dismissed,
    FeedbackTriage,
    GoldenAdded,
    ModelsView,
    SourceStatusList,
    UsageDashboard,
)
from citewise.api.console.sources import source_statuses
from citewise.api.console.usage import dashboard
from citewise.api.identity.caller import Caller
from citewise.api.openapi import problems
from citewise.api.routes_admin import audit_call

MAX_ID = 2**63 - 1

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.get("/sources", response_model=SourceStatusList,
            summary="Every source: size, readers, schedule, last runs and failed documents")
def sources(request: Request, who: Annotated[Caller, Depends(caller)]) -> dict:
    """Declared and indexed sources, every document counted, each with its last 30 runs
    (oldest first) and the documents its last run could not ingest, with a hint. Audited as
    `console.sources.read`."""
    audit_call(request, who, "console.sources.read")
    services = request.app.state.services
    settings = services.settings  # read once: a reload may swap it meanwhile
    return {"sources": source_statuses(
        services.sources, services.catalog, list(settings.sources),
        settings.default_readers, settings.ingest.schedule_ingest)}


@router.get("/usage", response_model=UsageDashboard,
            summary="Usage over 24 h, 7 or 30 days: a time series, totals and the top 20")
def usage(request: Request, who: Annotated[Caller, Depends(caller)],
          window: Literal["24h", "7d", "30d"] = "24h") -> dict:
    """Hourly points for `24h`, daily ones (UTC) for `7d` and `30d`, zeros included; totals;
    and the 20 providers, routes, keys and principals with the most requests. Read from the
    same store and with the same code as `citewise usage` and `GET /v1/usage`: for the same
    `since` they give the same numbers. p50/p95 come from fixed latency buckets (each the
    upper bound of its bucket, at most 25% above the true value; docs/operations.md). Audited
    as `console.usage.read`."""
    audit_call(request, who, "console.usage.read", detail={"window": window})
    return dashboard(request.app.state.door.usage, window)


@router.get("/models", response_model=ModelsView,
            summary="Each model provider: breaker, calls, errors, time to first token, cost")
def models(request: Request, who: Annotated[Caller, Depends(caller)]) -> dict:
    """From this replica's gateway, since it started (each replica keeps its own figures:
    `replica` says whose these are; the Prometheus counters add up every replica's). An
    installation without a model lists none. Audited as `console.models.read`."""
    audit_call(request, who, "console.models.read")
    gateway = request.app.state.services.gateway
    return {"providers": gateway.provider_stats() if gateway is not None else [],
            "replica": f"{socket.gethostname()}:{os.getpid()}"}


@router.get("/feedback", response_model=FeedbackTriage,
            summary="Feedback on answers, to triage; counts per day over 30 days")
def feedback(request: Request, who: Annotated[Caller, Depends(caller)],
             status: Literal["open", "added", "dismissed"] | None = None,
             limit: Annotated[int, Query(ge=1, le=500)] = 100) -> dict:
    """Newest first, each with the question, the answer, its citations, the comment and the
    document the reader said was right; `status` keeps one triage state (all by default).
    Audited as `console.feedback.read`."""
    audit_call(request, who, "console.feedback.read", detail={"status": status})
    return triage.triage(request.app.state.services.stores.conversations, status, limit)


@router.post("/feedback/{feedback_id}/golden", status_code=201, response_model=GoldenAdded,
             summary="Add the feedback to the golden set",
             responses=problems({404: "No feedback of that id.",
                                 422: "The feedback names no relevant document (a not-helpful "
                                      "answer without the right one): nothing to add."}))
def add_to_golden(feedback_id: Annotated[int, Path(ge=1, le=MAX_ID)], request: Request,
                  who: Annotated[Caller, Depends(caller)]) -> dict:
    """Makes the entry `citewise feedback export --golden` would (helpful: the documents the
    answer cited; not helpful: the document the reader named), appends it to
    `<data dir>/golden/feedback.jsonl` (the file `citewise eval --qa` reads) and marks the
    feedback `added`. Audited as `feedback.golden`."""
    services = request.app.state.services
    added = triage.add_to_golden(services.stores.conversations, services.catalog,
                                 services.sources, services.settings.data_dir, feedback_id,
                                 who.principal)
    audit_call(request, who, "feedback.golden", str(feedback_id),
               {"relevant": added["entry"]["relevant"]})
    return added


@router.post("/feedback/{feedback_id}/dismiss", response_model=Dismissed,
             summary="Dismiss the feedback", responses=problems({404: "No feedback of that id."}))
def dismiss(feedback_id: Annotated[int, Path(ge=1, le=MAX_ID)], request: Request,
            who: Annotated[Caller, Depends(caller)]) -> dict:
    """Marks it `dismissed` (nothing else changes). Audited as `feedback.dismiss`."""
    done = triage.dismiss(request.app.state.services.stores.conversations, feedback_id,
                          who.principal)
    audit_call(request, who, "feedback.dismiss", str(feedback_id))
    return done
