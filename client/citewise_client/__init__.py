"""A typed client of citewise's HTTP API, light enough for any application: it needs httpx and
pydantic, never citewise's server (no torch, no index).

* ``client.py``: ``CitewiseClient``, the calls (search, answer, feedback, documents, sources,
  ingest jobs, verify, usage, health), sync, and ``asearch`` for async retrievers;
* ``routes.py``: each route it calls, written once (method, path, scope, bodies), and the
  headers that name the user a key acts for (``ActingFor``);
* ``models.py``: the request and response bodies, typed;
* ``errors.py``: error answers (problem documents) as exceptions, by their type URN;
* ``environment.py``: ``CITEWISE_URL`` and ``CITEWISE_API_KEY``;
* ``langchain.py``, ``llamaindex.py``: citewise as a retriever (the ``langchain`` and
  ``llamaindex`` extras), over ``passages.py``, the citation metadata both attach.
"""

from citewise_client.client import CitewiseClient
from citewise_client.environment import KEY_VARIABLE, URL_VARIABLE
from citewise_client.errors import (
    BadRequest,
    CatalogLost,
    CitewiseClientError,
    Conflict,
    Forbidden,
    GuardrailBlocked,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    Refused,
    RunLocked,
    ServerError,
    Unauthorized,
    UnexpectedResponse,
    Unreachable,
)
from citewise_client.models import (
    Answer,
    Document,
    Filters,
    IngestJob,
    IngestRequest,
    SearchHit,
    SearchResponse,
    Source,
)
from citewise_client.routes import ActingFor

__all__ = [
    "KEY_VARIABLE", "URL_VARIABLE", "ActingFor", "Answer", "BadRequest", "CatalogLost",
    "CitewiseClient", "CitewiseClientError", "Conflict", "Document", "Filters", "Forbidden",
    "GuardrailBlocked", "IngestJob", "IngestRequest", "InvalidRequest", "NotFound",
    "PayloadTooLarge", "RateLimited", "Refused", "RunLocked", "SearchHit", "SearchResponse",
    "ServerError", "Source", "Unauthorized", "UnexpectedResponse", "Unreachable",
]
