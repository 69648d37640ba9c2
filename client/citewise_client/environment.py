"""Where the client finds its server and key when it is not told: ``CITEWISE_URL`` and
``CITEWISE_API_KEY``, the same variables as the ``citewise`` CLI's remote mode, ``citewise mcp``
and the Slack bot."""

from __future__ import annotations

import os

URL_VARIABLE = "CITEWISE_URL"
KEY_VARIABLE = "CITEWISE_API_KEY"


def url_from_environment(base_url: str | None) -> str | None:
    """``base_url``, else ``$CITEWISE_URL``; None when neither is set."""
    return base_url or os.environ.get(URL_VARIABLE) or None


def key_from_environment(api_key: str | None) -> str | None:
    """``api_key`` when given (an empty one: none), else ``$CITEWISE_API_KEY``."""
    key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE)
    return key or None
