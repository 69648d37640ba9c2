"""The model gateway: every call to a model goes through here.

* ``wire.py``: the OpenAI chat-completions protocol (request, response, server-sent events);
* ``breaker.py``: a circuit breaker per provider;
* ``provider.py``: one OpenAI-compatible endpoint (its HTTP client, concurrency and price);
* ``router.py``: ``Gateway``, the ordered chain with retries, failover, a deadline, usage and
  cost, and the metrics of all of it.

The gateway knows nothing of documents or answers: it takes chat messages and returns text and
usage, so the same machinery can serve any caller.
"""

from citewise.gateway.router import Completion, Gateway, GatewayError, StreamBroken
from citewise.gateway.wire import ChatUsage

__all__ = ["ChatUsage", "Completion", "Gateway", "GatewayError", "StreamBroken"]
