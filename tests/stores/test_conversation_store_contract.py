"""The conversations' contract (``api/conversation_store.py``), through the conversation rules
that use it, on every backend."""

from __future__ import annotations

import pytest

from citewise.api.composition import build_conversations
from citewise.api.conversation_store import StoredAnswer
from citewise.api.conversations import Viewer
from citewise.errors import NotFoundError
from citewise.retrieval.answering import Answer
from citewise.retrieval.answering.model import Citation
from tests.stores.test_document_catalog_contract import record, save

DANA = Viewer("user:dana", ("public", "user:dana"), "user:dana")
DANAS_AGENT = Viewer("user:dana via key:abc", ("public", "user:dana"), "user:dana")


def _answer(doc_id: str | None = None, text: str = "Fail over [1]") -> Answer:
    cites = [Citation(n=1, document_id=doc_id, source="kb", title="t", heading="h",
                      path="a.md", quote="q", score=0.5)] if doc_id else []
    return Answer(answer=text, citations=cites)


@pytest.fixture
def conversations(stores, backend):
    return build_conversations(backend, stores)


def test_a_conversation_belongs_to_its_owner_only(conversations, stores):
    cid = conversations.start(DANA, "how do I fail over?")
    conversations.check(cid, DANA)
    with pytest.raises(NotFoundError):
        conversations.check(cid, DANAS_AGENT)  # Dana's agent key is not Dana
    # Starting it again under another owner changes nothing of it.
    conversations.start(DANAS_AGENT, "hijack", conversation_id=cid)
    row = stores.conversations.get(cid)
    assert row.owner == "user:dana" and row.title == "how do I fail over?"
    assert [c["id"] for c in conversations.owned_by(DANA)] == [cid]
    assert conversations.owned_by(DANAS_AGENT) == []


def test_turns_are_numbered_in_order_and_deleted_with_the_conversation(conversations, stores):
    doc = record("kb", "a.md")
    save(stores, doc)
    cid = conversations.start(DANA, "q1")
    first = conversations.record(DANA, "q1", "q1", _answer(doc.id), cid)
    second = conversations.record(DANA, "and then?", "after q1, then?", _answer(doc.id), cid)
    turns = conversations.turns(cid, DANA)
    assert [(t.answer_id, t.turn) for t in turns] == [(first, 1), (second, 2)]
    assert turns[1].standalone == "after q1, then?" and turns[0].answer.answer == "Fail over [1]"
    assert stores.conversations.get(cid).turns == 2
    assert stores.conversations.answer(first).documents == [doc.id]
    conversations.delete(cid, DANA)
    assert stores.conversations.get(cid) is None and stores.conversations.answers(cid) == []


def test_an_answer_alone_is_kept_for_feedback(conversations, stores):
    answer_id = conversations.record(DANA, "what port?", "what port?", _answer(text="5432"))
    stored = stores.conversations.answer(answer_id)
    assert isinstance(stored, StoredAnswer)
    assert stored.conversation_id is None and stored.turn is None
    assert conversations.answer(answer_id, DANA)["answer"]["answer"] == "5432"
    with pytest.raises(NotFoundError):
        conversations.answer(answer_id, DANAS_AGENT)


def test_expiry_keeps_the_answers_that_received_feedback(stores):
    keep = StoredAnswer(id="a1", owner="user:dana", question="q", standalone="q",
                        answer=_answer(), created_at="2026-01-01T00:00:00.000+00:00",
                        conversation_id="old")
    drop = StoredAnswer(id="a2", owner="user:dana", question="q2", standalone="q2",
                        answer=_answer(), created_at="2026-01-01T00:00:01.000+00:00",
                        conversation_id="old")
    store = stores.conversations
    store.start("old", "user:dana", "old one", "2026-01-01T00:00:00.000+00:00")
    store.start("new", "user:dana", "new one", "2026-03-01T00:00:00.000+00:00")
    store.add_answer(keep)
    store.add_answer(drop)
    store.add_feedback("a1", "user:dana", True, "good", None, "2026-01-02T00:00:00.000+00:00")
    assert store.expire("2026-02-01T00:00:00.000+00:00") == 1
    assert store.get("old") is None and store.get("new") is not None
    assert store.answer("a1") is not None and store.answer("a2") is None
    ((given, answer),) = store.feedback_since("2026-01-01")
    assert given == {"helpful": True, "comment": "good", "wrong_citation": None,
                     "created_at": "2026-01-02T00:00:00.000+00:00", "right_document": None,
                     "status": "open"}
    assert answer.id == "a1"
    assert store.feedback_since("2026-01-03") == []


def test_conversations_answers_and_feedback_copy_into_another_store_once(stores,
                                                                        other_stores):
    """What ``citewise migrate-catalog`` reads and writes: conversations as they are (turns,
    times), every answer (turns and answers kept alone), feedback under its own ids; a second
    copy adds nothing, and a turn added there afterwards is the next one."""
    here = stores.conversations
    here.start("c1", "user:dana", "how do I fail over?", "2026-01-01T00:00:00.000+00:00")
    for n in (1, 2):
        here.add_answer(StoredAnswer(id=f"a{n}", owner="user:dana", question=f"q{n}",
                                     standalone=f"s{n}", answer=_answer("doc1"),
                                     created_at=f"2026-01-01T00:00:0{n}.000+00:00",
                                     conversation_id="c1", documents=["doc1"]))
    here.add_answer(StoredAnswer(id="alone", owner="key:bot", question="port?",
                                 standalone="port?", answer=_answer(text="5432"),
                                 created_at="2026-01-02T00:00:00.000+00:00"))
    here.add_feedback("a2", "user:dana", False, "wrong step", 1, "2026-01-03T00:00:00.000+00:00",
                      right_document="kb/failover.md")
    here.add_feedback("alone", "key:bot", True, None, None, "2026-01-04T00:00:00.000+00:00")

    there = other_stores.conversations
    conversations, answers = list(here.export_conversations()), list(here.export_answers())
    feedback = list(here.export_feedback())
    assert [a.id for a in answers] == ["a1", "a2", "alone"]
    assert [(f.answer_id, f.helpful, f.wrong_citation, f.right_document)
            for _, f in feedback] == [("a2", False, 1, "kb/failover.md"),
                                      ("alone", True, None, None)]
    there.import_conversations(conversations)
    assert there.import_answers(answers) == 3 and there.import_answers(answers) == 0
    assert there.import_feedback(feedback) == 2 and there.import_feedback(feedback) == 0
    there.import_conversations(conversations)
    assert there.get("c1") == here.get("c1") and there.get("c1").turns == 2
    assert there.answers("c1") == here.answers("c1") and there.answer("alone") == here.answer(
        "alone")
    assert list(there.export_feedback()) == feedback
    assert there.feedback_since("") == here.feedback_since("")
    third = there.add_answer(StoredAnswer(id="a3", owner="user:dana", question="q3",
                                          standalone="s3", answer=_answer(),
                                          created_at="2026-01-05T00:00:00.000+00:00",
                                          conversation_id="c1"))
    assert third.turn == 3
