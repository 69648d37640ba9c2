"""The operator console's routes (``/v1/admin/...``): sources, usage, models and feedback
triage, read by the admin section of the page. The ``admin`` scope (the front door's rule for
``/v1/admin``), and every call in the audit log, reads included, as the other admin routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from citewise.api.auth import caller
from citewise.api.console.schemas import SourceStatusList
from citewise.api.console.sources import source_statuses
from citewise.api.identity.caller import Caller
from citewise.api.routes_admin import audit_call

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
