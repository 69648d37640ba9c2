"""Secrets never reach the index: credentials in a document are replaced before anything is stored.

The pipeline calls ``redact_document`` on every document of every source, before hashing, so the
blob store, the catalog and the index only ever hold the redacted text. Each secret becomes a
marker such as ``[REDACTED:aws-access-key-id]`` on the same line, so line numbers (and with them
code citations) stay right. The document's ``metadata["redactions"]`` records what kind of secret
was found on which line, never the secret.

What counts as a secret:

* credentials with a recognisable shape: AWS access key ids, GitHub, GitLab, Slack, Stripe,
  Google, npm and OpenAI-style tokens, Slack webhook URLs, JSON Web Tokens, private key blocks,
  the key of a Sentry DSN; and those of detect-secrets' plugins (``redact_plugins.py``:
  Artifactory, Azure storage, Cloudant, Discord, IBM Cloud, Mailchimp, PyPI, SendGrid,
  SoftLayer, Square, Telegram, Twilio);
* an AWS secret access key written in prose, with no name assigned to it: 40 base64
  characters of mixed case within 300 characters of an access key id, or after the word
  "secret" on its line in a text that mentions AWS;
* the password in a connection string (``postgres://app:s3cret@db/prod``);
* a value assigned to a name that says it is secret (``password``, ``secret``, ``token``,
  ``api_key``, ``aws_secret_access_key``...), unless the value is visibly not a credential:
  a placeholder (``${DB_PASSWORD}``, ``<token>``, ``changeme``-style ``***``), a reference to
  something else (``os.environ["X"]``, ``settings.API_KEY``, an env var name), or a plain word.
  Unquoted values must also look random (letters mixed with digits or symbols, or high entropy).

Deliberately kept: bare hex digests (commit shas, checksums) and other random-looking strings with
no secret-ish name next to them. They are far more often identifiers than credentials, and
redacting them would break searches for a commit or a checksum. A hex value *assigned to* a
secret-ish name is redacted like any other value.

Speed matters: every document of every source goes through this. Each shaped detector runs
only when one of its literal triggers occurs in the text (a substring search), and assignments
are found by one scan for the secret-ish keywords, whose surroundings are then read in Python.
About 130 ms per MB of ordinary docs here: the demo corpus (333 KB) takes 38-51 ms, against
22-28 ms before the detect-secrets plugins and the prose AWS secret (each plugin is gated on the
long words of the text: ``redact_plugins.py``), on a loaded 2-core machine.
"""

from __future__ import annotations

import dataclasses
import math
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from citewise.ingest.redact_plugins import plugin_spans
from citewise.types import SourceDocument

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


@dataclass(frozen=True)
class _Shape:
    """A token whose shape alone says what it is.

    The whole match is replaced, unless the pattern has a group ``(?P<secret>...)``: then only
    that part. ``triggers`` are literals one of which must occur in the text (in its lowercased
    form with ``lower``) before the pattern runs at all, which keeps the scan of an ordinary
    document to a few substring searches. ``not_after`` lists characters that may not precede
    the match (a cheap word boundary that keeps the pattern's literal prefix fast).
    """

    kind: str
    pattern: re.Pattern[str]
    triggers: tuple[str, ...]
    lower: bool = False
    not_after: str = ""
    check_value: bool = False  # examples are common here: skip placeholders and plain words


def _shape(kind: str, pattern: str, triggers: Iterable[str], **kw: Any) -> _Shape:
    return _Shape(kind, re.compile(pattern, re.S), tuple(triggers), **kw)


_AWS_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA",
                 "APKA", "ASCA")
_SHAPES: list[_Shape] = [
    _shape("private-key",
           # A PEM/OpenSSH/PGP private key block; also one written on one line with \n escapes,
           r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
           r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
           # ...or a truncated one (no END line): everything that still looks like key material.
           r"|(?:(?:\\n|\r?\n)[A-Za-z0-9+/=:\- ]*)+)",
           ["PRIVATE KEY"]),
    _shape("aws-access-key-id", r"(?:" + "|".join(_AWS_PREFIXES) + r")[A-Z0-9]{16}(?![A-Z0-9])",
           _AWS_PREFIXES, not_after=_ALNUM[26:]),
    _shape("aws-secret-access-key",
           r"(?i:aws_?secret_?(?:access_?)?key|secret_?access_?key)[\"']?[ \t]*(?:[:=]|=>)[ \t]*"
           r"[\"']?(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
           ["secret"], lower=True),
    _shape("github-token", r"(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})",
           ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"], not_after=_ALNUM + "_"),
    _shape("gitlab-token",
           r"gl(?:pat|dt|rt|ptt|cbt|oas|soat|ft|imt|agent)-[A-Za-z0-9_\-]{20,}",
           ["gl"], not_after=_ALNUM + "_"),
    _shape("slack-token", r"xox[abposr]-[A-Za-z0-9\-]{10,}", ["xox"], not_after=_ALNUM),
    _shape("slack-webhook", r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/\-]{20,}",
           ["hooks.slack.com"]),
    _shape("stripe-key", r"(?:sk|rk)_live_[A-Za-z0-9]{20,}", ["_live_"], not_after=_ALNUM),
    _shape("google-api-key", r"AIza[A-Za-z0-9_\-]{35}", ["AIza"], not_after=_ALNUM),
    _shape("npm-token", r"npm_[A-Za-z0-9]{36}", ["npm_"], not_after=_ALNUM),
    # citewise's own API keys (api/identity/keys.py): cw_<10 base32>_<43 url-safe base64>.
    _shape("citewise-key", r"cw_[a-z2-7]{10}_[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])", ["cw_"],
           not_after=_ALNUM + "_"),
    _shape("openai-key", r"sk-(?:proj-|ant-(?:api\d\d-)?)?[A-Za-z0-9_\-]{32,}", ["sk-"],
           not_after=_ALNUM),
    _shape("jwt", r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", ["eyJ"],
           not_after=_ALNUM + "_-"),
    _shape("bearer-token",
           r"(?i:bearer)[ \t]+(?P<secret>[A-Za-z0-9\-._~+/]{20,}=*)(?![A-Za-z0-9\-._~+/=])",
           ["bearer"], lower=True, not_after=_ALNUM, check_value=True),
    _shape("basic-auth",
           r"(?i:authorization)[\"']?[ \t]*[:=][ \t]*[\"']?(?i:basic)[ \t]+"
           r"(?P<secret>[A-Za-z0-9+/]{12,}={0,2})(?![A-Za-z0-9+/=])",
           ["basic"], lower=True, check_value=True),
    # A Sentry DSN: https://<32-hex key>[:<32-hex secret>]@o1.ingest.sentry.io/<project>, or a
    # self-hosted host. The key lets anyone post events to the project: it goes, the host stays.
    _shape("sentry-dsn",
           r"https?://(?P<secret>[0-9a-f]{32}(?::[0-9a-f]{32})?)@[A-Za-z0-9.\-]+(?::\d+)?/"
           r"(?:[A-Za-z0-9._\-]+/)*\d+(?![A-Za-z0-9])",
           ["://"], lower=True),
    _shape("connection-string-password",
           # scheme://user:password@host - only the password goes.
           r"[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@\"'<>]+:(?P<secret>[^\s@/\"'<>]+)@",
           ["://"], not_after=_ALNUM + "+.-", check_value=True),
]
_REPEATED = re.compile(r"(.)\1{7,}")  # XXXXXXXX, 00000000: an example, not a real token

# An AWS secret access key written in prose ("...AKIA... and the secret wJalr..."), with no
# assignment to read its name from: 40 base64 characters mixing cases (a commit sha is lowercase
# hex, so it never qualifies), near an access key id or after the word "secret" on its line in a
# text that speaks of AWS.
_AWS_SECRET_IN_PROSE = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_AWS_SECRET_NEAR = 300  # characters between the key id and its secret
_SECRET_WORD_BEFORE = re.compile(r"(?i)secret\b[^\n]{0,40}$")

# ``name = value``, ``name: value``, ``"name": "value"``, ``name => value``, ``NAME=value``:
# found by scanning for the keyword, then reading the name around it and the value after it.
_KEYWORD_WORDS = (
    r"p(?:ass(?:word|wd|phrase)|wd|rivate_?key)|secret|token|api_?key|access_?key|credential"
)
_KEYWORD = re.compile(_KEYWORD_WORDS)
_KEYWORD_ANY_CASE = re.compile(_KEYWORD_WORDS, re.I)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_ASSIGN_TAIL = re.compile(
    r"[A-Za-z0-9_.\-]*[\"']?[ \t]*(?::=|=>|[:=])[ \t]*(?P<quote>[\"'`]?)"
    r"(?P<value>[^\s\"'`,;]+)(?P=quote)"
)
# Names that hold something *about* a secret, not the secret: token_env, password_field,
# and plurals, which name collections ("Image pull secrets: ...").
_NOT_A_SECRET_NAME = re.compile(
    r"(?i)(?:[_.\-](?:env|envvar|var|name|names|field|file|path|dir|prefix|suffix|header|param"
    r"|label|type|kind|id|len|length|count|hint|policy|url|uri|endpoint|ttl|expiry|expires"
    r"|expires_in|timeout|pattern|regex|help|prompt|hash|digest|format|version|min|max|size"
    r"|mode|method|scope|scopes|usage|enabled|required|source|settings|store|manager|ref)"
    r"|(?:secrets|tokens|passwords|keys|credentials))$"
)
_PLACEHOLDER = re.compile(
    r"""(?ix)^(?:
        [$%<{\[(].*           # ${VAR}, $VAR, %s, <token>, {password}, [secret], (none)
      | .*\{\{.*              # {{ template }}
      | .*(.)\1{7,}.*         # XXXXXXXX, 00000000: nobody's real token
      | \*+ | \.{3,} | -+ | _+ | \#+
      | (?:your|my|example|sample|dummy|fake|placeholder|redacted|changeme|insert|replace|
           enter|put)(?:[_\-][a-z_\-]*)?   # your-api-key-here, changeme (letters only)
      | none|null|nil|true|false|undefined|required|optional|string|str|bytes|secret|
        password|passwd|pass|token|apikey|api_key|value|empty
    )$"""
)
# Values that name or point at a secret rather than being one.
_ENV_NAME = re.compile(r"^[A-Z]+(?:_[A-Z0-9]+)*$")  # CITEWISE_GIT_TOKEN
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")  # settings.key
_WORDS = re.compile(r"^[A-Za-z_\-./]+$")  # required, user_password, secrets/prod.yaml
_KEBAB_NAME = re.compile(r"^[a-z]+(?:-[a-z0-9]+)*-[a-z]+(?:-[a-z0-9]+)*$")  # a-k8s-name-6wl6b
_URL_OR_PATH = re.compile(r"^(?:[a-z][a-z0-9+.\-]*://|/|\./|~/)")


def _entropy(s: str) -> float:
    counts = Counter(s)
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _looks_secret(value: str, quoted: bool) -> bool:
    """Is a value found next to a secret-ish name a credential, rather than a reference to one?

    A quoted literal is a secret unless it is a placeholder, an env var name or words/a path
    (``"required"``, ``"secrets/prod.yaml"``); letters-only literals count only when they look
    random. An unquoted value may be code (``password = user_password``), so it must also mix
    letters with digits, or look random, and not be a dotted reference or a kebab-case name.
    """
    if len(value) < 6 or any(c in value for c in "()[]{}"):
        return False
    if _PLACEHOLDER.match(value) or _ENV_NAME.match(value) or _URL_OR_PATH.match(value):
        return False
    if _WORDS.match(value):
        return quoted and len(value) >= 12 and _entropy(value) >= 3.6 and not value.islower()
    if quoted:
        return True
    if _DOTTED.match(value) or _KEBAB_NAME.match(value):
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    return (has_digit and has_alpha) or _entropy(value) >= 3.5


def _line_starts(text: str) -> list[int]:
    starts = [0]
    find = text.find
    i = find("\n")
    while i != -1:
        starts.append(i + 1)
        i = find("\n", i + 1)
    return starts


def _marker(kind: str, secret: str) -> str:
    # One marker per line the secret covered: line numbers after it stay right.
    return "\n".join(f"[REDACTED:{kind}]" for _ in secret.split("\n"))


def redact_text(text: str) -> tuple[str, list[dict[str, Any]]]:
    """``text`` with every secret replaced, and ``[{"kind", "line"}]`` for each one (1-based).

    Replacements never add or remove a newline, so every other line keeps its number.
    """
    spans: list[tuple[int, int, str]] = []  # (start, end, kind) of each secret
    low = text.lower()
    for shape in _SHAPES:
        haystack = low if shape.lower else text
        if not any(t in haystack for t in shape.triggers):
            continue
        group = "secret" if "secret" in shape.pattern.groupindex else 0
        for m in shape.pattern.finditer(text):
            if shape.not_after and m.start() > 0 and text[m.start() - 1] in shape.not_after:
                continue
            secret = m.group(group)
            if shape.kind != "private-key" and _REPEATED.search(secret):
                continue
            if shape.check_value and not _looks_secret(secret, quoted=True):
                continue
            spans.append((*m.span(group), shape.kind))
    spans.extend(_aws_secrets_in_prose(text, low, spans))
    spans.extend(plugin_spans(text, low))
    # The keyword scan runs on the lowercased text where lowercasing keeps every offset.
    keywords = _KEYWORD.finditer(low) if len(low) == len(text) else _KEYWORD_ANY_CASE.finditer(text)
    taken_until = 0
    for k in keywords:
        if k.start() < taken_until:
            continue  # a second keyword inside a name already read ("secret_token")
        start = k.start()
        while start > 0 and text[start - 1] in _NAME_CHARS:
            start -= 1
        tail = _ASSIGN_TAIL.match(text, k.end())
        if tail is None:
            continue
        taken_until = tail.end()
        name = text[start : tail.start("quote")].rstrip("\"' \t:=>")
        value = tail.group("value")
        if _NOT_A_SECRET_NAME.search(name) or not _looks_secret(value, bool(tail.group("quote"))):
            continue
        if any(s <= tail.start("value") < e for s, e, _ in spans):
            continue  # already redacted by its shape
        spans.append((*tail.span("value"), _assignment_kind(name)))
    if not spans:
        return text, []
    starts = _line_starts(text)
    out: list[str] = []
    findings: list[dict[str, Any]] = []
    pos = 0
    for s, e, kind in _merged(spans):
        out.append(text[pos:s])
        out.append(_marker(kind, text[s:e]))
        findings.append({"kind": kind, "line": bisect_right(starts, s)})
        pos = e
    out.append(text[pos:])
    return "".join(out), findings


def _merged(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Overlapping finds of two detectors become one cut covering both, named after the
    longest at the earliest start: no detector's narrower view may leave part of a secret."""
    out: list[tuple[int, int, str]] = []
    for s, e, kind in sorted(spans, key=lambda span: (span[0], -span[1], span[2])):
        if out and s < out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e, out[-1][2])
            continue
        out.append((s, e, kind))
    return out


def _aws_secrets_in_prose(text: str, low: str,
                          spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    key_ids = [s for s, _, kind in spans if kind == "aws-access-key-id"]
    if not key_ids and not ("aws" in low and "secret" in low):
        return []
    found = []
    for m in _AWS_SECRET_IN_PROSE.finditer(text):
        if not _aws_secret_shaped(m.group()):
            continue
        near_key_id = any(abs(m.start() - k) <= _AWS_SECRET_NEAR for k in key_ids)
        line_start = text.rfind("\n", 0, m.start()) + 1
        if near_key_id or _SECRET_WORD_BEFORE.search(text, line_start, m.start()):
            found.append((*m.span(), "aws-secret-access-key"))
    return found


def _aws_secret_shaped(value: str) -> bool:
    return (any(c.isupper() for c in value) and any(c.islower() for c in value)
            and any(c.isdigit() or c in "/+" for c in value)) and not _REPEATED.search(value)


# Text that arrives piece by piece (a streamed answer, cleaned by api/guarded_stream.py) can be
# released as it comes only where no later text can change how it is redacted, and each piece
# must be read with the text before it that a detector looks at. Most detectors look at one
# token; these two functions say where the others look.
_KEY_ID_CHARS = 20
_READ_BACK = 200  # a name before its value, "Authorization: Basic", a private key's header line
_OPEN_PRIVATE_KEY = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY")


def undecided_from(text: str) -> int:
    """Where ``text`` stops being final: the start of the first token shaped like an AWS secret
    that text still to come could make one (an access key id up to 300 characters after it,
    or, after the word "secret" on its line, a first mention of AWS); ``len(text)`` if none."""
    mentions_aws = "aws" in text.lower()
    for m in _AWS_SECRET_IN_PROSE.finditer(text):
        if not _aws_secret_shaped(m.group()):
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        if len(text) - m.start() <= _AWS_SECRET_NEAR + _KEY_ID_CHARS or (
                not mentions_aws and _SECRET_WORD_BEFORE.search(text, line_start, m.start())):
            return m.start()
    return len(text)


def reach_back(text: str, start: int) -> int:
    """Where the text that the detectors read to decide ``text[start:]`` begins: a couple of
    hundred characters back (at whitespace, so no token is cut), or further, to the header of
    a private key block still open at ``start`` (its lines are redacted under it), and to the
    beginning when ``text[start:]`` holds a token shaped like an AWS secret (its key id may be
    300 characters back, the mention of AWS anywhere)."""
    if any(_aws_secret_shaped(m.group()) for m in _AWS_SECRET_IN_PROSE.finditer(text, start)):
        return 0
    back = max(0, start - _READ_BACK)
    while back > 0 and not text[back - 1].isspace():
        back -= 1
    begin = text.rfind("-----BEGIN ", 0, start)
    if 0 <= begin < back and _OPEN_PRIVATE_KEY.match(text, begin) \
            and "-----END " not in text[begin:start]:
        back = begin
    return back


def _assignment_kind(name: str) -> str:
    low = name.lower()
    for word, kind in (("pass", "password"), ("pwd", "password"), ("token", "token"),
                       ("key", "api-key"), ("secret", "secret")):
        if word in low:
            return kind
    return "credential"


def redact_document(doc: SourceDocument) -> SourceDocument:
    """A copy of ``doc`` whose ``content`` (and ``body``) carry no secrets.

    ``metadata["redactions"]`` lists the kind and line of each one (lines of ``content``). Text
    that is not UTF-8 is scanned as if it were, with the odd bytes kept as they are, so a file in
    another encoding cannot smuggle a key past the scan.
    """
    raw = doc.content.decode("utf-8", errors="surrogateescape")
    content, findings = redact_text(raw)
    if not findings:
        return dataclasses.replace(doc)
    body = redact_text(doc.body)[0] if doc.body is not None else None
    metadata = {**doc.metadata, "redactions": findings}
    return dataclasses.replace(
        doc, content=content.encode("utf-8", errors="surrogateescape"), body=body,
        metadata=metadata,
    )
