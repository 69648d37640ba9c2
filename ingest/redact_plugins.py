"""Yelp's detect-secrets plugins, run by ``redact.py`` beside its own shapes for breadth.

detect-secrets (https://github.com/Yelp/detect-secrets) is maintained and knows credential
shapes of services ``redact.py`` does not (SendGrid, Twilio, Azure storage, PyPI...). Only its
plugins' patterns are used: never its scanning machinery (which reads files, keeps a baseline and
may *verify* a secret by calling the service with it) and never anything that sends a request.

Enabled: the plugins that recognise a credential by its shape, where ``redact.py`` has no shape
of its own (``PLUGINS``). Left out, on purpose:

* ``HexHighEntropyString`` / ``Base64HighEntropyString``: they flag every commit sha, checksum
  and UUID-like id, which runbooks are full of and people search for (``redact.py`` keeps them);
* ``KeywordDetector``: ``redact.py``'s own assignment scan does this job, with the placeholder
  and reference checks that keep ``password = settings.password`` readable;
* ``IPPublicDetector``: an address is not a credential;
* the plugins for shapes ``redact.py`` already has (AWS, GitHub, GitLab, Slack, Stripe, npm,
  OpenAI, JWT, private keys, basic auth): one detector per shape keeps one kind name per secret.

The patterns are run over the whole text at once, in multiline mode, rather than line by line
as detect-secrets does: one ``finditer`` per pattern instead of one per line, and a match that
a pattern's ``\\s*`` carries over a line break is still a secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

PLUGINS: tuple[type[RegexBasedDetector], ...] = (
    ArtifactoryDetector, AzureStorageKeyDetector, CloudantDetector, DiscordBotTokenDetector,
    IbmCloudIamDetector, IbmCosHmacDetector, MailchimpDetector, PypiTokenDetector,
    SendGridDetector, SoftlayerDetector, SquareOAuthDetector, TelegramBotTokenDetector,
    TwilioKeyDetector,
)
# What some patterns match around the secret (Artifactory's ``(?:\s|=|:|"|^)...(?:\s|"|$)``).
_EDGES = " \t\r\n=:\"'"


def _kind(detector: RegexBasedDetector) -> str:
    """``'SendGrid API Key'`` -> ``sendgrid-api-key``: the kind a redaction marker names."""
    return re.sub(r"[^a-z0-9]+", "-", detector.secret_type.lower()).strip("-")


# What each plugin's secret itself looks like (its value, not the name before it), and how
# long it is at least: a necessary condition, checked on the words of the text that are long
# enough to hold it, so that an ordinary document costs one ``str.split`` and a few searches over
# a few words instead of every plugin's patterns over all of it. Where a plugin's patterns
# ignore case, its gate spells both cases out (``re.I`` on a character class is slow): a gate
# may be looser than its plugin, never tighter. Cloudant's patterns may match a 24-letter
# password, which long prose words can look like: its gate is the name before it instead, on
# the lowercased text (``None`` for the length).
_GATES: dict[type[RegexBasedDetector], tuple[int | None, str]] = {
    ArtifactoryDetector: (11, r"AKC[a-zA-Z0-9]{10}|AP[\dABCDEF][a-zA-Z0-9]{8}"),
    AzureStorageKeyDetector: (99, r"AccountKey="),
    CloudantDetector: (None, r"cl(?:oudant|ou)?[_-]?(?:api)?[_-]?(?:key|pwd|pw|pass|token)"
                             r"|cloudant\.com"),
    DiscordBotTokenDetector: (59, r"[MNO][a-zA-Z\d_-]{23,25}\.[a-zA-Z\d_-]{6}\."),
    IbmCloudIamDetector: (44, r"[a-zA-Z0-9_\-]{44}"),
    IbmCosHmacDetector: (48, r"[a-fA-F0-9]{48}"),
    MailchimpDetector: (36, r"[0-9a-z]{32}-us[0-9]"),
    PypiTokenDetector: (85, r"pypi-AgE"),
    SendGridDetector: (69, r"SG\.[a-zA-Z0-9_-]{22}\."),
    SoftlayerDetector: (64, r"[a-zA-Z0-9]{64}"),
    SquareOAuthDetector: (50, r"sq0csp-"),
    TelegramBotTokenDetector: (44, r"\d{8,10}:[0-9A-Za-z_-]{35}"),
    TwilioKeyDetector: (34, r"(?:AC|SK)[a-z0-9]{32}"),
}
_SHORTEST_SECRET = min(n for n, _ in _GATES.values() if n)


_Compiled = tuple[int | None, re.Pattern[str], str, list[re.Pattern[str]]]


def _compiled() -> list[_Compiled]:
    """(shortest, gate, kind, patterns) per plugin."""
    out = []
    for plugin in PLUGINS:
        shortest, gate = _GATES[plugin]
        # Read from an instance: detect-secrets declares both as (abstract) properties, which
        # each plugin class overrides with a class attribute.
        detector = plugin()
        patterns = [re.compile(p.pattern, p.flags | re.M) for p in detector.denylist]
        out.append((shortest, re.compile(gate), _kind(detector), patterns))
    return out


_PLUGIN_PATTERNS = _compiled()
KINDS = frozenset(kind for _, _, kind, _ in _PLUGIN_PATTERNS)


def plugin_spans(text: str, low: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, kind)`` of every secret the plugins find in ``text``.

    ``low`` is ``text.lower()``. As detect-secrets reads a match: its non-empty groups are the
    secrets when the pattern has groups, else the whole match, less the delimiters the pattern
    matched around it.
    """
    words = [w for w in text.split() if len(w) >= _SHORTEST_SECRET]
    for shortest, gate, kind, patterns in _PLUGIN_PATTERNS:
        if shortest is None:
            if not gate.search(low):
                continue
        elif not gate.search(" ".join(w for w in words if len(w) >= shortest)):
            continue
        yield from _matches(text, kind, patterns)


def _matches(text: str, kind: str,
             patterns: list[re.Pattern[str]]) -> Iterator[tuple[int, int, str]]:
    for pattern in patterns:
        for m in pattern.finditer(text):
            if pattern.groups:
                for g in range(1, pattern.groups + 1):
                    if m.group(g):
                        yield (*m.span(g), kind)
                continue
            start, end = m.span()
            while start < end and text[start] in _EDGES:
                start += 1
            while end > start and text[end - 1] in _EDGES:
                end -= 1
            if start < end:
                yield start, end, kind
