"""The semantic cache never serves an answer to somebody who could not have received it, and
never one whose documents changed since. A randomized property test over principals, documents
and edits (content, readers, deletion), checking every hit against the catalog and against
what a fresh answer would have been allowed to cite."""

from __future__ import annotations

import random

import pytest

from citewise.ingest.jobs import run_source
from citewise.types import Identity
from tests.kb import folder_source, write

SEED = 1203
ROUNDS = 200
GROUPS = ["sre", "payments", "security"]
USERS = ["dana"]
TOPICS = {t: "How do I {v} the " + t + " cluster?" for t in ("redis", "kafka", "postgres",
                                                              "dns")}


def runbook(topic: str, version: int, readers: list[str]) -> str:
    return f"""---
title: {topic} runbook
readers: [{", ".join(readers)}]
---
# {topic} runbook

## Steps

1. Run `{topic}ctl check --rev {version}` to see the state of the {topic} cluster.
2. Run `{topic}ctl repair --rev {version}` to repair the {topic} cluster.
"""


def readers_for(rng: random.Random) -> list[str]:
    return rng.sample([f"group:{g}" for g in GROUPS] + ["public"], rng.randint(1, 2))


@pytest.fixture
def world(make_services, tmp_path):
    services = make_services(answer_cache_threshold=0.9)
    return services, tmp_path / "rb"


def test_cache_hits_never_cross_scopes_or_serve_stale_documents(world):
    services, folder = world
    rng = random.Random(SEED)
    docs = {t: {"version": 1, "readers": readers_for(rng), "present": True} for t in TOPICS}

    def sync() -> None:
        for t, d in docs.items():
            path = folder / f"{t}.md"
            if d["present"]:
                write(folder, f"{t}.md", runbook(t, d["version"], d["readers"]))
            elif path.exists():
                path.unlink()
        report = run_source(services.pipeline, folder_source(folder, name="rb",
                                                             readers=("public",)),
                            trigger="t", force=False)
        assert report.status in ("succeeded", "partial"), report.summary()

    sync()
    hits = stale_refused = asked = abstained = 0
    for round_no in range(ROUNDS):
        op = rng.random()
        if op < 0.05:
            t = rng.choice(list(TOPICS))
            docs[t]["version"] += 1  # the content changes
            sync()
            continue
        if op < 0.09:
            t = rng.choice(list(TOPICS))
            docs[t]["readers"] = readers_for(rng)
            sync()
            continue
        if op < 0.12:
            t = rng.choice(list(TOPICS))
            docs[t]["present"] = not docs[t]["present"]
            sync()
            continue
        user = rng.choice([None, USERS[0]])
        groups = tuple(sorted(rng.sample(GROUPS[:2], rng.randint(0, 1))))
        identity = Identity(user=user, groups=groups)
        principals = set(identity.principals())
        topic = rng.choice(list(TOPICS))
        question = TOPICS[topic].format(v=rng.choice(["repair", "fix", "mend"]))
        answer = services.answers.answer(question, identity)
        where = f"round {round_no} (seed {SEED}): {question!r} as {sorted(principals)}"
        for c in answer.citations:
            record = services.catalog.get_document(c.document_id)
            assert record is not None, f"{where}: cites a deleted document"
            assert principals & set(record.readers), f"{where}: cites a document it may not read"
            # The quoted version is the current one: the command carries the revision.
            current = docs[record.title.split()[0]]["version"]
            assert f"--rev {current}" in answer.answer or "--rev" not in answer.answer, \
                f"{where}: stale answer {answer.answer!r}"
        if answer.cached:
            hits += 1
        asked += 1
        abstained += answer.abstained
    # The property is only meaningful if the cache was used, and was refused when stale.
    assert hits >= 10, (hits, asked, abstained)
    from citewise import metrics

    stale_refused = metrics.CACHE_DROPPED.labels("stale")._value.get()
    assert stale_refused >= 1
