"""Follow-ups as standalone questions: "and how do I roll it back?" after a question about a
checkout deploy is searched as the rollback of *that* deploy.

With a model configured, the model rewrites the follow-up from the conversation (one short
call, falling back to the rule below if it fails). Without one, the rule: a question that leans
on the one before it (opens with "and", "what about", "then"...; points back with "it", "that",
"them"...; or is only a few words) keeps its own words, loses the pointing ones, and gains the
previous question's subject and the title of the document the previous answer cited first.
A question that stands on its own is searched as asked.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from citewise.gateway import Gateway, GatewayError

log = logging.getLogger("citewise.answer")

_OPENERS = re.compile(r"^\s*(and|also|then|so|ok(ay)?|but|or|what about|how about|and then|"
                      r"same (for|with)|now)\b[\s,]*", re.I)
_POINTERS = frozenset("it its it's that this those these they them their there same one "
                      "ones former latter above".split())
_QUESTION_WORDS = frozenset("""a an the and or but if then so to of in on at by for with from
into onto about as is are was were be been being do does did doing done i we you he she my our
your me us what when where which who whom whose why how can could should would will shall may
might must have has had get got please there here just also now ok okay again step steps""".split())
SHORT = 3  # content words: "what about staging?" leans on the question before it
# What people do and ask about doing: a follow-up made only of these ("and how do I roll
# back?") is about the previous subject; one that names something else ("what about the
# postgres disk?") has changed the subject and keeps only the previous question's action.
ACTIONS = frozenset("""roll rollback back revert undo restart reboot check verify confirm test
fix repair resolve mitigate escalate page notify alert monitor watch deploy release ship scale
drain promote failover fail over start stop run rerun retry clean delete remove rotate renew
know see find tell look take takes long time next after before first last else worked work
works working happen happens done finish finished succeed succeeded owns own owner who whom
contact call ask safe risk impact affected mean means cause causes why when where broken
breaks""".split())
# Where and when, not what: "and on staging?" narrows the previous subject, it does not change it.
QUALIFIERS = frozenset("""staging stage prod production dev development qa sandbox canary
preprod preview local cluster region weekend weekends night nights holiday holidays today
tomorrow""".split())

REWRITE_RULES = """You rewrite the user's last message into one standalone question that can \
be understood without the conversation: name what "it", "that" and the like refer to. Keep the \
user's words otherwise. Reply with the question only, no quotes, no preamble."""


@dataclass(frozen=True)
class Previous:
    question: str  # the previous turn's standalone question
    title: str | None  # the document its answer cited first


def content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._/-]*", text.lower())
            if w not in _QUESTION_WORDS and w not in _POINTERS]


def leans_on_previous(question: str) -> bool:
    words = re.findall(r"[a-z']+", question.lower())
    return bool(_OPENERS.match(question) or _POINTERS & set(words)
                or len(content_words(question)) <= SHORT)


def rewrite_by_rule(question: str, previous: Previous) -> str:
    """A follow-up as a standalone question. It keeps its own words; where it points back
    ("it", "that") or names no subject of its own, the previous question's subject and the
    title of the document the last answer cited are put in; where it names a new subject, it
    only borrows the previous question's action ("what about postgres?" after a question on
    failing over redis asks how to fail over postgres)."""
    own = _OPENERS.sub("", question).strip().rstrip("?").strip()
    mine = content_words(own)
    before = content_words(previous.question)
    pointing = bool(_POINTERS & set(re.findall(r"[a-z']+", own.lower())))
    new_subject = [w for w in mine if w not in ACTIONS and w not in QUALIFIERS
                   and w not in before]
    if new_subject and not pointing:
        # "what about postgres?" borrows "fail over"; a follow-up that says more about its
        # own subject ("the postgres WAL volume filling up") is searched as it is.
        actions = [w for w in before if w in ACTIONS and w not in mine]
        borrow = len(mine) <= 2 and not any(w in ACTIONS for w in mine)
        return f"{own} {' '.join(actions) if borrow else ''}".strip() + "?"
    subject = " ".join(dict.fromkeys(w for w in before if w not in set(mine)))
    words, placed = [], False
    for word in own.split():
        if word.lower().strip(",.") in _POINTERS:
            if subject and not placed:
                words.append(subject)
                placed = True
            continue
        words.append(word)
    if subject and not placed:
        words.append(subject)
    rewritten = " ".join(words) + "?"
    if previous.title and previous.title.lower() not in rewritten.lower():
        rewritten += f" ({previous.title})"
    return rewritten


def standalone(question: str, previous: Previous | None, *, gateway: Gateway | None = None,
               history: list[dict[str, Any]] | None = None) -> tuple[str, str]:
    """The question to search and answer, and how it was made: ``asked`` (it stands alone or
    there is nothing before it), ``model`` or ``rule``."""
    if previous is None or not leans_on_previous(question):
        return question, "asked"
    if gateway is not None:
        turns = [m for m in history or [] if m.get("role") in ("user", "assistant")][-6:]
        messages = [{"role": "system", "content": REWRITE_RULES}, *turns,
                    {"role": "user", "content": question}]
        try:
            text = gateway.complete(messages, max_tokens=80).text.strip().strip('"')
            if text and len(text) <= 500 and "\n" not in text:
                return text, "model"
        except GatewayError as e:
            log.warning("the model could not rewrite a follow-up, using the rule: %s", e)
    return rewrite_by_rule(question, previous), "rule"
