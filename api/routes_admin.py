"""Administration over HTTP: API keys, usage, the audit log and reloading the config file
(the ``admin`` scope, checked by the front door). Every call is written to the audit log, reads
included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from citewise.api.auth import caller
from citewise.api.identity.caller import Caller
from citewise.api.openapi import problems
from citewise.api.schemas import ResponseBody
from citewise.errors import InvalidRequestError

router = APIRouter(prefix="/v1", tags=["admin"])


class KeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, examples=["slack-bot"])
    scopes: list[Literal["search", "answer", "ingest", "admin"]] = Field(
        min_length=1, examples=[["search", "answer"]])
    principal: str | None = Field(default=None, max_length=200,
                                  description="user:<id> or group:<name> the key acts as.")
    assert_identity: bool = Field(
        default=False, description="May name the end user in X-Citewise-User/Groups.")
    shares_conversations: bool = Field(
        default=False, description="The key is one of its principal's own doors: it shares "
        "the conversations of their sign-in sessions (otherwise a key's are its own).")
    expires: str | None = Field(default=None, max_length=40,
                                description="90d, 12h, 30m or an ISO date; unset = never.")
    limits: dict[str, Annotated[int, Field(ge=0, le=10_000_000)]] = Field(
        default_factory=dict, description="Own limits, e.g. {\"answer_per_minute\": 600}.")


class ApiKeyView(ResponseBody):
    """An API key as ``GET /v1/keys`` shows it: everything but its secret's hash."""

    name: str
    id: str = Field(description="The key's id, the middle of its secret: `cw_<id>_...`.")
    scopes: list[Literal["search", "answer", "ingest", "admin"]]
    principal: str | None = Field(description="user:<id> or group:<name> the key acts as.")
    assert_identity: bool
    shares_conversations: bool
    limits: dict[str, int] = Field(description="Its own limits, e.g. "
                                   "{\"answer_per_minute\": 600}.")
    status: Literal["active", "revoked", "expired"]
    created_at: str
    created_by: str | None
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None


class ApiKeyList(ResponseBody):
    keys: list[ApiKeyView]


class NewApiKey(ApiKeyView):
    secret: str = Field(description="The key itself (`cw_...`): shown this once, never stored.")


class UsageRow(ResponseBody):
    """One group's figures. The group is named by the one field ``group_by`` chose."""

    principal: str | None = Field(default=None, description="With group_by=principal.")
    key: str | None = Field(default=None, description="With group_by=key (null: no key).")
    route: str | None = Field(default=None, description="With group_by=route.")
    day: str | None = Field(default=None, description="With group_by=day (YYYY-MM-DD).")
    provider: str | None = Field(default=None, description="With group_by=provider (null: "
                                 "no model was called: extractive, cached, or not a question).")
    requests: int
    errors: int = Field(description="Answered with a status of 400 or more.")
    denied: int = Field(description="Refused with 401, 403 or 429.")
    mean_latency_ms: float
    results: int
    tokens_in: int
    tokens_out: int
    cost: float
    cache_hits: int
    saved_tokens: int = Field(description="Model tokens the answer cache saved.")
    answers: int = Field(description="Questions answered.")
    abstentions: int = Field(description="Questions the service declined to answer.")
    p50_ms: float | None = Field(description="Median latency, as the upper bound of its "
                                 "latency bucket (at most 25% above the true value).")
    p95_ms: float | None


class UsageReport(ResponseBody):
    since: str
    group_by: Literal["principal", "key", "route", "day", "provider"]
    rows: list[UsageRow]


class AuditEntry(ResponseBody):
    id: int
    at: str
    actor: str
    key: str | None
    action: str = Field(examples=["key.create"])
    target: str | None
    outcome: str = Field(examples=["ok", "denied"])
    detail: dict[str, Any]
    client: str | None
    request_id: str | None


class AuditLog(ResponseBody):
    entries: list[AuditEntry]


def audit_call(request: Request, who: Caller, action: str, target: str | None = None,
               detail: dict | None = None) -> None:
    """Write an admin route's call to the audit log (reads included)."""
    request.app.state.door.audit.record(
        action, actor=who.principal, key=who.key, target=target, detail=detail,
        client=request.client.host if request.client else None,
        request_id=request.state.request_id)


@router.get("/keys", response_model=ApiKeyList, summary="API keys (never their secrets)")
def list_keys(request: Request, who: Annotated[Caller, Depends(caller)]) -> dict:
    audit_call(request, who, "keys.list")
    return {"keys": [k.public() for k in request.app.state.door.keys.list()]}


@router.post("/keys", status_code=201, response_model=NewApiKey,
             summary="Create an API key; its secret is shown once",
             responses=problems({409: "A key of that name exists (names are never reused)."}))
def create_key(body: KeyRequest, request: Request,
               who: Annotated[Caller, Depends(caller)]) -> dict:
    key, secret = request.app.state.door.keys.create(
        body.name, list(body.scopes), principal=body.principal,
        assert_identity=body.assert_identity, expires=body.expires, limits=body.limits,
        created_by=who.principal, shares_conversations=body.shares_conversations)
    audit_call(request, who, "key.create", key.name, {
        "scopes": sorted(key.scopes), "principal": key.principal,
        "assert_identity": key.assert_identity,
        "shares_conversations": key.shares_conversations, "expires_at": key.expires_at})
    return {**key.public(), "secret": secret}


@router.delete("/keys/{name}", response_model=ApiKeyView,
               summary="Revoke an API key (at once, for good)",
               responses=problems({404: "No key of that name."}))
def revoke_key(name: Annotated[str, Path(max_length=64)], request: Request,
               who: Annotated[Caller, Depends(caller)]) -> dict:
    key = request.app.state.door.keys.revoke(name)
    audit_call(request, who, "key.revoke", key.name)
    return key.public()


def parse_since(text: str | None, default: timedelta = timedelta(days=7)) -> datetime:
    """``7d``, ``24h``, ``30m`` ago, or an ISO date/time."""
    now = datetime.now(UTC)
    if not text:
        return now - default
    text = text.strip()
    units = {"d": "days", "h": "hours", "m": "minutes"}
    if text[-1:] in units and text[:-1].isdigit():
        return now - timedelta(**{units[text[-1]]: int(text[:-1])})
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequestError(
            f"since={text!r} is neither a duration nor a date",
            hint="use 7d, 24h, 30m or an ISO date such as 2026-12-01") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


@router.get("/usage", response_model=UsageReport, response_model_exclude_unset=True,
            summary="Who used what: requests, errors, results, tokens and cost")
def usage(
    request: Request,
    who: Annotated[Caller, Depends(caller)],
    since: Annotated[str | None, Query(max_length=40, description="7d, 24h or a date")] = None,
    until: Annotated[str | None, Query(max_length=40)] = None,
    group_by: Literal["principal", "key", "route", "day", "provider"] = "principal",
) -> dict:
    start = parse_since(since)
    end = parse_since(until) if until else None
    audit_call(request, who, "usage.read", detail={"since": start.isoformat(),
                                               "group_by": group_by})
    rows = request.app.state.door.usage.report(start, end, group_by)
    return {"since": start.isoformat(timespec="seconds"), "group_by": group_by, "rows": rows}


@router.get("/audit", response_model=AuditLog, summary="The audit log, newest first")
def audit(
    request: Request,
    who: Annotated[Caller, Depends(caller)],
    since: Annotated[str | None, Query(max_length=40, description="30d (default), 24h or a "
                                       "date")] = None,
    action: Annotated[str | None, Query(max_length=64, description="Only this action, e.g. "
                                        "key.create")] = None,
    actor: Annotated[str | None, Query(max_length=200, description="Only this actor, e.g. "
                                       "key:ci-bot or user:dana")] = None,
    outcome: Annotated[str | None, Query(max_length=32, description="Only this outcome: ok "
                                         "or denied")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict:
    start = parse_since(since, default=timedelta(days=30))
    audit_call(request, who, "audit.read")
    entries = request.app.state.door.audit.read(start.isoformat(timespec="seconds"), limit,
                                                action, actor=actor, outcome=outcome)
    return {"entries": entries}


class ReloadedSources(BaseModel):
    added: list[str] = Field(description="Declared now, not before.")
    removed: list[str] = Field(description="No longer declared (their documents stay indexed).")
    changed: list[str] = Field(description="Declared with other settings.")


class ReloadAnswer(BaseModel):
    config_file: str | None = Field(description="The file read.")
    read_at: str | None = Field(description="When it was read (ISO 8601).")
    reloaded: list[Literal["sources", "schedule", "guardrails"]] = Field(
        description="What changed and now applies; empty when nothing did.")
    sources: ReloadedSources
    needs_restart: list[str] = Field(
        description="Settings changed in the file or the environment that only a restart "
        "applies (data_dir, host, port, qdrant_url, embedding_model, the identity methods...).",
        examples=[["data_dir"]])
    summary: str = Field(examples=["reloaded /etc/citewise.toml: sources; sources added: "
                                   "team-notes"])


@router.post("/admin/reload", summary="Reload the config file: sources, schedule, guardrails",
             responses=problems({422: "The config file is invalid (the problem says what "
                                      "is wrong); the server keeps the config it has."}))
def reload_config(request: Request, who: Annotated[Caller, Depends(caller)]) -> ReloadAnswer:
    """Reads the config file again, as `kill -HUP <pid>` of the server does. The declared
    sources, the `[schedule]` and the `[[guardrails]]` apply to the requests after this one
    (those in flight finish with the old ones); other settings that changed are listed in
    `needs_restart`, not applied. Checked before anything changes. Audited as `config.reload`."""
    reloaded = request.app.state.reloader.reload(
        actor=who.principal, via="POST /v1/admin/reload", key=who.key,
        client=request.client.host if request.client else None,
        request_id=request.state.request_id)
    return ReloadAnswer(**reloaded.as_dict())
