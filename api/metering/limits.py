"""Which buckets a request draws on: the caller's, per route class, and its key's own.

Every principal (a person, a group-bound key, an anonymous key) has a per-minute rate and an
optional per-day quota for each of search, answer and ingest (``CITEWISE_RATE_*`` and
``CITEWISE_QUOTA_*``; 0 = unlimited). A key created with its own limits
(``--limit answer_per_minute=600``) also draws on buckets of its own, shared by everyone it acts
for: the Slack bot's key caps the bot as a whole while each asking engineer keeps their own
allowance. A key that may assert identity has such limits even when created without
(``CITEWISE_IDENTITY_KEY_LIMITS``, for each limit it does not set itself): otherwise a bot key
that names a new user on every request would get a fresh per-person allowance each time.

``ingest`` counts jobs started, not requests: a request the route refuses (a path that is not
allowed, a body that does not validate, a job already running) gives its tokens back
(``COUNTS_SUCCESSES``), so a typo does not cost the minute's allowance.
"""

from __future__ import annotations

from citewise.api.identity.caller import Caller
from citewise.api.identity.keys import parse_limits
from citewise.api.metering.buckets import WINDOWS, Decision, Policy, TokenBuckets
from citewise.api.metering.settings import MeteringSettings
from citewise.errors import CitewiseError, ConfigError
from citewise.settings import comma_separated

CLASSES = ("search", "answer", "ingest")
# Classes whose limit counts what was done: a response that is not a success gives back the
# tokens its request took.
COUNTS_SUCCESSES = frozenset({"ingest"})


def identity_key_limits(settings: MeteringSettings) -> dict[str, int]:
    """``CITEWISE_IDENTITY_KEY_LIMITS`` as limits, or a ``ConfigError`` saying what is wrong."""
    try:
        return parse_limits(comma_separated(settings.identity_key_limits))
    except CitewiseError as e:
        raise ConfigError(f"CITEWISE_IDENTITY_KEY_LIMITS: {e.message}", hint=e.hint) from None


def key_limits(own: dict[str, int], asserts_identity: bool,
               defaults: dict[str, int]) -> dict[str, int]:
    """The limits a key's buckets have: its own, and for a key that may assert identity the
    defaults for those it does not set (its own 0 stays unlimited: set on purpose)."""
    return {**defaults, **own} if asserts_identity else dict(own)


class RateLimiter:
    def __init__(self, settings: MeteringSettings, buckets: TokenBuckets) -> None:
        self.buckets = buckets
        self.identity_key_defaults = identity_key_limits(settings)
        self.defaults = {
            (cls, period): getattr(settings, f"{'rate' if period == 'minute' else 'quota'}_"
                                             f"{cls}_per_{period}")
            for cls in CLASSES for period in WINDOWS
        }

    def policies(self, caller: Caller, cls: str) -> list[Policy]:
        out = []
        limits = key_limits(caller.limits, caller.asserts_identity, self.identity_key_defaults)
        for period, window in WINDOWS.items():
            quota = self.defaults[(cls, period)]
            if quota:
                out.append(Policy(f"{cls}-{period}", f"{caller.principal}|{cls}|{period}",
                                  quota, window))
            own = limits.get(f"{cls}_per_{period}")
            if caller.key and own:
                out.append(Policy(f"key-{cls}-{period}", f"key:{caller.key}|{cls}|{period}",
                                  own, window))
        return out

    def check(self, caller: Caller, cls: str) -> Decision:
        return self.buckets.take(self.policies(caller, cls))

    def settle(self, cls: str, decision: Decision, status: int) -> None:
        """Once the route has answered: a refused request of a class that counts successes
        gives its tokens back."""
        if cls in COUNTS_SUCCESSES and decision.allowed and not 200 <= status < 300:
            self.buckets.give_back(decision.policies)
