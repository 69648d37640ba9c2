"""Stored conversations are shown only through the caller's rights of today.

A turn is kept as it was answered, but it is shown, used for a follow-up or given feedback only
by its owner (the same principal, signed in the same way) and only while they may still read
every document it cites: a key acting as ``user:bob`` is not Bob's session, a user who left a
group and a document whose readers were narrowed both turn the old turn into "withheld".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.api.composition import build_services
from citewise.api.settings import Settings
from citewise.ingest.jobs import run_source
from tests.kb import (
    REDIS,
    SECRET,
    SECRET_TITLE,
    SECRET_WORDS,
    folder_source,
    make_key,
    write,
    write_kb,
)

LOOPBACK = ("127.0.0.1", 5000)
BOB_AT_WORK = {"X-Citewise-User": "bob@example.com", "X-Citewise-Groups": "security"}
BOB_AFTER = {"X-Citewise-User": "bob@example.com"}  # left the security group
DANA = {"X-Citewise-User": "dana"}
SECRET_QUESTION = "How do we rotate the payment provider API keys?"


@pytest.fixture
def kb(tmp_path, dense):
    return write_kb(tmp_path / "kb")


@contextmanager
def served(data) -> Iterator[TestClient]:
    services = build_services(Settings(data_dir=data))
    try:
        with TestClient(create_app(services=services), client=LOOPBACK) as c:
            yield c
    finally:
        services.close()


def ingest(kb, data) -> None:
    services = build_services(Settings(data_dir=data))
    try:
        assert run_source(services.pipeline, folder_source(kb), trigger="t").status == \
            "succeeded"
    finally:
        services.close()


def ask(c: TestClient, question: str, headers: dict, conversation_id: str | None = None
        ) -> dict:
    body = {"question": question}
    if conversation_id:
        body["conversation_id"] = conversation_id
    resp = c.post("/v1/answer", json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    return resp.json()


def leaks(text: str) -> list[str]:
    """What of the restricted runbook a text shows (its title is also the question the tests
    ask, so it counts only where a question is not what shows it)."""
    return [w for w in SECRET_WORDS if w.lower() in text.lower()]


def test_a_key_acting_as_a_person_is_not_their_session(kb, tmp_path):
    data = tmp_path / "data"
    ingest(kb, data)
    with served(data) as c:
        services = c.app.state.services
        agent = make_key(services, "bob-agent", scopes="search,answer",
                         principal="user:bob@example.com")
        first = ask(c, SECRET_QUESTION, BOB_AT_WORK)
        assert first["citations"][0]["path"] == SECRET
        cid, answer_id = first["conversation_id"], first["answer_id"]
        # The probe's reproduction: the agent key listed and read Bob's restricted answer.
        assert c.get("/v1/conversations", headers=agent).json() == {"conversations": []}
        for resp in (c.get(f"/v1/conversations/{cid}", headers=agent),
                     c.post("/v1/answer", json={"question": "and how often?",
                                                "conversation_id": cid}, headers=agent),
                     c.post(f"/v1/answers/{answer_id}/feedback", json={"helpful": True},
                            headers=agent)):
            assert resp.status_code == 404, resp.text
            assert not leaks(resp.text)
        # Bob's own session still sees his conversation whole.
        mine = c.get(f"/v1/conversations/{cid}", headers=BOB_AT_WORK).json()
        assert mine["turns"][0]["withheld"] is False
        assert "vault" in json.dumps(mine["turns"][0]["answer"])
        # The agent's own conversations are its own: Bob's session does not see them.
        theirs = ask(c, "How do I fail over the Redis primary?", agent)
        listed = c.get("/v1/conversations", headers=BOB_AT_WORK).json()["conversations"]
        assert theirs["conversation_id"] not in {x["id"] for x in listed}

        # The operator may say a key is Bob's own door: it then shares his conversations,
        # still only through its own rights (it is not in the security group).
        door = make_key(services, "bob-laptop", scopes="search,answer",
                        principal="user:bob@example.com", shares_conversations=True)
        listed = c.get("/v1/conversations", headers=door).json()["conversations"]
        assert cid in {x["id"] for x in listed}
        got = c.get(f"/v1/conversations/{cid}", headers=door)
        assert got.json()["turns"][0]["withheld"] is True and not leaks(got.text)


def test_a_user_who_left_a_group_sees_their_old_turn_withheld(kb, tmp_path):
    data = tmp_path / "data"
    ingest(kb, data)
    with served(data) as c:
        first = ask(c, SECRET_QUESTION, BOB_AT_WORK)
        cid = first["conversation_id"]
        assert first["citations"][0]["path"] == SECRET
        second = ask(c, "and how often is that done?", BOB_AT_WORK, cid)
        assert SECRET_TITLE.lower() in second["question"].lower()  # leaned on turn 1

        got = c.get(f"/v1/conversations/{cid}", headers=BOB_AFTER)
        assert got.status_code == 200
        turns = got.json()["turns"]
        assert [t["withheld"] for t in turns] == [True, True]
        assert turns[0]["withheld_reason"] and turns[0]["answer"]["citations"] == []
        assert turns[0]["question"] == SECRET_QUESTION  # their own words stay
        assert not leaks(got.text), leaks(got.text)
        # The rewrite of turn 2 named the restricted runbook: shown as asked instead.
        assert turns[1]["standalone_question"] == turns[1]["question"]

        # A follow-up leans on nothing the caller can no longer read.
        third = ask(c, "and who does it?", BOB_AFTER, cid)
        assert not leaks(json.dumps(third)), leaks(json.dumps(third))
        assert SECRET_TITLE.lower() not in third["question"].lower()
        assert all(x["path"] != SECRET for x in third["citations"])

        # Feedback on the old answer is still taken, and shows nothing of it.
        resp = c.post(f"/v1/answers/{first['answer_id']}/feedback",
                      json={"helpful": False}, headers=BOB_AFTER)
        assert resp.status_code == 201 and not leaks(resp.text)
        stored = c.app.state.services.conversations
        from citewise.api.conversations import Viewer
        from citewise.types import Identity

        viewer = Viewer("user:bob@example.com", tuple(Identity(user="bob@example.com")
                                                      .principals()))
        assert stored.answer(first["answer_id"], viewer)["withheld"] is True
        # Back in the group, the turns are whole again: nothing was deleted.
        again = c.get(f"/v1/conversations/{cid}", headers=BOB_AT_WORK).json()["turns"]
        assert [t["withheld"] for t in again[:2]] == [False, False]


def test_a_document_whose_readers_were_narrowed_withholds_the_turns_citing_it(kb, tmp_path):
    data = tmp_path / "data"
    ingest(kb, data)
    with served(data) as c:
        first = ask(c, "How do I fail over the Redis primary?", DANA)
        cid = first["conversation_id"]
        assert first["citations"][0]["path"] == REDIS
        assert "Sentinel" in first["answer"]
    text = (kb / REDIS).read_text().replace("tags: [redis, failover]",
                                            "tags: [redis, failover]\nreaders: [group:sre]")
    write(kb, REDIS, text)
    ingest(kb, data)
    with served(data) as c:
        got = c.get(f"/v1/conversations/{cid}", headers=DANA)
        turn = got.json()["turns"][0]
        assert turn["withheld"] is True and "Sentinel" not in got.text
        assert c.get(f"/v1/conversations/{cid}",
                     headers={**DANA, "X-Citewise-Groups": "sre"}).json()["turns"][0][
                         "withheld"] is False
