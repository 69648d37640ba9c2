"""Streamed text through the guardrails: released as it comes, yet cleaned exactly as the whole
answer is, with no secret or personal data in any delta, however the model cut its chunks."""

from __future__ import annotations

import pytest

from citewise.api.guarded_stream import TextRelease
from citewise.api.guardrails import PII_WINDOW, SECRETS_WINDOW, Guarded, Guardrails
from citewise.api.settings import GuardrailConfig
from citewise.errors import GuardrailBlocked
from citewise.retrieval.answering import AnswerBlock
from citewise.retrieval.answering.stream import AnswerEvent, block_event
from tests.ingest.test_redact import CASES, PASSED_BEFORE, PLUGIN_CASES

ROUTE = "/v1/answer"
SECRETS = Guardrails()  # the defaults: secrets redacted, personal data left alone
PII = Guardrails([GuardrailConfig(name="pii", kind="pii", action="redact")])
BEFORE = ("The release train leaves at noon, so check the dashboards first and read the "
          "deploy notes. Then open the runbook for the service and follow its steps in "
          "order; ask in the channel when a step fails. The values you need are these: ")
AFTER = " and nothing else.\n\nRotate it after the incident, then close the ticket."

PRIVATE_KEY = ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
               "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n-----END ENCRYPTED PRIVATE KEY-----")
SECRET_SAMPLES = (
    [(line, [secret]) for _, line, secret in CASES]
    + [(text, secrets) for text, secrets, _ in PASSED_BEFORE]
    + [(template.format(secret), [secret]) for _, template, secret in PLUGIN_CASES]
    + [(PRIVATE_KEY, ["MIIEvQIBADANBgkq", "b3BlbnNzaC1rZXkt"]),
       ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0Zq81Lm0Xr5Vn2Bc7Kd4Ws9\n",
        ["lQOYBF0Zq81Lm0Xr5Vn2Bc7Kd4Ws9"]),
       # an AWS secret in prose before its key id: decided only when the key id arrives
       ("the secret q8Vd2Lr7Xb0Ty5Nc4Hw1Zs6Jk9Pm3Gf8Ua2Ee7Ro belongs to the access key "
        "id AKIAZ7QX3PLM4NR2TW5Y", ["q8Vd2Lr7Xb0Ty5Nc4Hw1Zs6Jk9Pm3Gf8Ua2Ee7Ro"])])
PII_SAMPLES = [
    # tests/api/test_guardrails.py's contacts, and the other shapes people write
    ("Page the cache lead at cache-lead@fernhill.example or call +44 20 7946 0958 when the "
     "warm-up does not help.", ["cache-lead@fernhill.example", "7946 0958"]),
    ("Call the vendor on +1 (415) 555-0132 ext. 2087 during office hours.", ["555-0132"]),
    ("In the US dial (415) 555-0132 for the duty manager.", ["555-0132"]),
    ("The test card 4111 1111 1111 1111 is charged nothing.", ["1111 1111"]),
    ("Refund card 4111-1111-1111-1111 by hand.", ["1111-1111"]),
]


def streamed(release: TextRelease, pieces: list[str]) -> list[str]:
    deltas = [release.feed(p) for p in pieces] + [release.finish()]
    return [d for d in deltas if d]


def ways_to_split(text: str, around: tuple[int, int]) -> list[list[str]]:
    """Token by token (1, 3 and 4 characters) and in two at every position near the value."""
    ways = [[text[i:i + n] for i in range(0, len(text), n)] for n in (1, 3, 4)]
    ways += [[text[:i], text[i:]] for i in range(max(1, around[0] - 60), around[1] + 2)]
    return ways


def leaks(guardrails: Guardrails, window: int, text: str, values: list[str]) -> list[str]:
    """How streaming ``text`` differs from cleaning it whole, for each way of cutting it."""
    whole = guardrails.clean(text, ROUTE)[0]
    start = min(text.find(v) for v in values)
    problems = []
    for pieces in ways_to_split(text, (start, start + max(map(len, values)))):
        deltas = streamed(TextRelease(lambda t: guardrails.clean(t, ROUTE), window), pieces)
        shown = [v for v in values for d in deltas if v in d]
        if "".join(deltas) != whole or shown:
            problems.append(f"{[len(p) for p in pieces][:3]}: {shown or deltas}")
    return problems


@pytest.mark.parametrize("sample, values", SECRET_SAMPLES, ids=[
    f"secret{i}" for i in range(len(SECRET_SAMPLES))])
def test_a_streamed_secret_is_cleaned_as_in_the_whole_answer(sample, values):
    text = BEFORE + sample + AFTER
    assert all(v not in SECRETS.clean(text, ROUTE)[0] for v in values)
    assert leaks(SECRETS, SECRETS.stream_window(ROUTE), text, values) == []


@pytest.mark.parametrize("sample, values", PII_SAMPLES, ids=[
    f"pii{i}" for i in range(len(PII_SAMPLES))])
def test_streamed_personal_data_is_cleaned_as_in_the_whole_answer(sample, values):
    text = BEFORE + sample + AFTER
    assert all(v not in PII.clean(text, ROUTE)[0] for v in values)
    assert leaks(PII, PII.stream_window(ROUTE), text, values) == []


# Measured with leaks() at every window from 0: the least each sample needs. Below it, a
# pattern whose spaces put a cut inside it is released before it is recognised.
PRIVATE_KEY_NEEDS = 27  # "ENCRYPTED PRIVATE KEY-----\n" after the cut at "-----BEGIN "
PII_NEEDS = 14  # "(415) 555-0132" after "+1 ", "1111 1111 1111" after "4111 "
PII_ONLY = Guardrails([GuardrailConfig(name="pii", kind="pii", action="redact"),
                       GuardrailConfig(name="secrets", kind="secrets", action="off")])


def test_the_windows_cover_what_the_patterns_need_and_it_is_needed():
    assert SECRETS.stream_window(ROUTE) == SECRETS_WINDOW >= PRIVATE_KEY_NEEDS
    assert PII.stream_window(ROUTE) == PII_WINDOW >= PII_NEEDS
    key = BEFORE + PRIVATE_KEY + AFTER
    assert leaks(SECRETS, PRIVATE_KEY_NEEDS - 1, key, ["MIIEvQ"])
    assert not leaks(SECRETS, PRIVATE_KEY_NEEDS, key, ["MIIEvQ"])
    for sample, values in PII_SAMPLES[1], PII_SAMPLES[3]:
        assert leaks(PII_ONLY, PII_NEEDS - 1, BEFORE + sample + AFTER, values)
        assert not leaks(PII_ONLY, PII_NEEDS, BEFORE + sample + AFTER, values)


def test_a_denied_phrase_widens_the_window():
    deny = Guardrails([GuardrailConfig(name="hr", kind="deny", action="flag",
                                       terms=["salary", "performance improvement plan meeting"])])
    assert deny.stream_window(ROUTE) == len("performance improvement plan meeting") + 1


def test_prose_is_released_word_by_word_behind_the_window():
    release = TextRelease(lambda t: SECRETS.clean(t, ROUTE), SECRETS_WINDOW)
    words = [w + " " for w in (BEFORE * 2).split(" ")]
    deltas = streamed(release, words)
    assert len(deltas) >= len(words) * 2 // 3  # a short word may not reach past the window
    assert all(len(d) < SECRETS_WINDOW for d in deltas[:-1])
    assert "".join(deltas) == "".join(words)


def test_decisions_are_kept_once_for_the_text_released():
    release = TextRelease(lambda t: SECRETS.clean(t, ROUTE), SECRETS_WINDOW)
    text = BEFORE + "key_id = AKIAZ7QX3PLM4NR2TW5Y" + AFTER * 3
    streamed(release, [text[i:i + 3] for i in range(0, len(text), 3)])
    assert [(d.kind, d.detail) for d in release.decisions] == [("secrets",
                                                                "aws-access-key-id")]


# The events a door relays ------------------------------------------------------------------
def events_of(markdown: str, chunk: int):
    """A model's answer as the answer service streams it: deltas, and each block once the
    next has started (as BlockTracker does), then done."""
    from citewise.retrieval.answering.markdown import blocks_from_markdown
    from citewise.retrieval.answering.model import Answer

    sent, text = 0, ""
    for i in range(0, len(markdown), chunk):
        text += markdown[i:i + chunk]
        yield AnswerEvent("delta", {"text": markdown[i:i + chunk]})
        blocks = blocks_from_markdown(text)
        while sent < len(blocks) - 1:
            yield block_event(sent, blocks[sent])
            sent += 1
    blocks = blocks_from_markdown(text)
    while sent < len(blocks):
        yield block_event(sent, blocks[sent])
        sent += 1
    yield AnswerEvent("done", {"answer": Answer(answer=markdown, blocks=blocks).model_dump()})


ANSWER = ("Fail over the cache by promoting the replica [1].\n\n"
          "1. Run the Sentinel failover [1]\n2. Restart the checkout pods [1]\n\n"
          "Then watch the hit rate on the dashboard until it recovers [1].")


def test_each_block_is_sent_after_the_text_it_closes():
    guard = Guarded(SECRETS, ROUTE)
    out, text = [], ""
    for event in guard.events(events_of(ANSWER, 4)):
        out.append(event.event)
        if event.event == "delta":
            text += event.data["text"]
        if event.event == "block":
            block = AnswerBlock.model_validate(event.data["block"])
            last = (block.text or block.steps[-1].text).strip()[-12:]
            assert last in text, (event.data["index"], text)
    assert out.count("block") == 3 and out[-1] == "done"
    assert out.count("delta") >= len(ANSWER) // 4 // 2
    assert text == ANSWER


def test_a_blocked_term_ends_the_stream_with_nothing_of_it_sent():
    deny = Guardrails([GuardrailConfig(name="hr", kind="deny", action="block",
                                       terms=["disciplinary case"])])
    guard = Guarded(deny, ROUTE)
    answer = BEFORE + "the disciplinary case of Sam is closed. " + AFTER
    events = list(guard.events(events_of(answer, 3)))
    text = "".join(e.data["text"] for e in events if e.event == "delta")
    assert events[-1].event == "error" and "hr" in events[-1].data["detail"]
    assert "disciplinary" not in text and text and BEFORE.startswith(text)
    assert [d["action"] for d in guard.decisions] == ["block"]  # for the audit log
    with pytest.raises(GuardrailBlocked):
        deny.clean(answer, ROUTE)
