"""A randomized property test of the permission model through every content route.

Forty documents with random readers (users, groups, public) in three sources; then 1,200
random requests, each from a random identity (named by the Slack-bot-style key that may assert
it, or bound to a key's principal) to a random content route: search (POST and GET, with and
without filters), answer, a document by id, the source list, and liveness. The property: no
route ever returns a document, a passage, a title or a count that the identity may not read.

The seed is printed with every failure, so a failing case can be replayed exactly.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from fastapi.testclient import TestClient

from citewise.api.app import create_app
from citewise.ingest.jobs import run_source
from tests.kb import folder_source, make_key, write

SEED = int(os.environ.get("CITEWISE_PROPERTY_SEED", "20261203"))
CASES = int(os.environ.get("CITEWISE_PROPERTY_CASES", "1200"))
USERS = [f"u{i}" for i in range(6)]
GROUPS = [f"g{i}" for i in range(5)]
SOURCES = ["alpha", "beta", "gamma"]
SHARED = ["failover", "replica", "deploy", "latency", "certificate", "backup", "queue"]


def _readers(rng: random.Random) -> list[str]:
    if rng.random() < 0.2:
        return ["public"]
    pool = [f"user:{u}" for u in USERS] + [f"group:{g}" for g in GROUPS]
    return sorted(rng.sample(pool, rng.randint(1, 3)))


@pytest.fixture(scope="module")
def world(tmp_path_factory, dense):
    from citewise.api.composition import build_services
    from citewise.api.settings import Settings

    rng = random.Random(SEED)
    base = tmp_path_factory.mktemp("property")
    docs = {}  # document path -> (source, readers, unique word, title)
    for i in range(40):
        source = SOURCES[i % 3]
        readers = _readers(rng)
        word = f"zq{i:02d}marker"
        title = f"Runbook {i} {rng.choice(SHARED)} {word}"
        words = rng.sample(SHARED, 3)
        body = (f"---\ntitle: {title}\nreaders: [{', '.join(readers)}]\n---\n# {title}\n\n"
                f"The {words[0]} of service {i} needs the {word} procedure. Check the "
                f"{words[1]} first, then the {words[2]}.\n\n## Steps\n\n1. Run `fix-{word}`.\n"
                f"2. Confirm the {words[0]} recovered.\n")
        write(base / source, f"doc-{i}.md", body)
        docs[(source, f"doc-{i}.md")] = (readers, word, title)
    services = build_services(Settings(data_dir=base / "data", require_auth=True,
                                       rate_search_per_minute=0, rate_answer_per_minute=0))
    for source in SOURCES:
        report = run_source(services.pipeline, folder_source(base / source, name=source),
                            trigger="t")
        assert report.status == "succeeded", report.summary()
    ids = {(r.source, r.path): r.id for s in SOURCES
           for r in services.catalog.documents_of_source(s).values()}
    bot = make_key(services, "bot", "search,answer", assert_identity=True)
    bound = {p: make_key(services, f"k-{p.replace(':', '-')}", "search,answer", principal=p)
             for p in ("user:u0", "group:g1", "group:g3")}
    yield services, docs, ids, bot, bound
    services.close()


def _principals(user: str | None, groups: list[str]) -> set[str]:
    return {"public"} | ({f"user:{user}"} if user else set()) | {f"group:{g}" for g in groups}


def test_no_route_returns_what_the_caller_may_not_read(world):
    services, docs, ids, bot, bound = world
    rng = random.Random(SEED + 1)
    by_id = {ids[key]: (key, *value) for key, value in docs.items()}
    routes = ["search-post", "search-get", "answer", "answer-stream", "chat", "document",
              "sources", "healthz"]
    weights = [30, 20, 8, 4, 6, 22, 10, 5]
    checked = {r: 0 for r in routes}
    with TestClient(create_app(services=services), client=("10.0.0.9", 4000)) as c:
        for case in range(CASES):
            if rng.random() < 0.15:
                principal = rng.choice(list(bound))
                headers = bound[principal]
                user = principal[5:] if principal.startswith("user:") else None
                groups = [principal[6:]] if principal.startswith("group:") else []
            else:
                user = rng.choice([None, *USERS])
                groups = rng.sample(GROUPS, rng.randint(0, 2))
                headers = dict(bot)
                if user:
                    headers["X-Citewise-User"] = user
                if groups:
                    headers["X-Citewise-Groups"] = ",".join(groups)
            allowed = _principals(user, groups)
            readable = {doc_id for doc_id, (_k, readers, *_r) in by_id.items()
                        if allowed & set(readers)}
            hidden_words = {word for doc_id, (_k, _r, word, _t) in by_id.items()
                            if doc_id not in readable}
            route = rng.choices(routes, weights)[0]
            target = rng.choice(list(by_id))
            query = rng.choice([by_id[target][2], by_id[target][3], rng.choice(SHARED)])
            where = f"case {case} (seed {SEED}): {route} as {sorted(allowed)} for {query!r}"
            if route in ("search-post", "search-get"):
                if route == "search-post":
                    body = {"query": query, "top_k": rng.choice([3, 10, 50])}
                    if rng.random() < 0.3:
                        body["filters"] = {"sources": rng.sample(SOURCES, 2)}
                    resp = c.post("/v1/search", json=body, headers=headers)
                else:
                    resp = c.get("/v1/search", params={"q": query, "top_k": 20}, headers=headers)
                assert resp.status_code == 200, (where, resp.text)
                for result in resp.json()["results"]:
                    assert result["document_id"] in readable, where
            elif route == "answer":
                resp = c.post("/v1/answer", json={"question": f"what is {query}?"},
                              headers=headers)
                assert resp.status_code == 200, (where, resp.text)
                answer = resp.json()
                for citation in answer["citations"]:
                    assert citation["document_id"] in readable, where
                assert not any(w in answer["answer"] for w in hidden_words), where
            elif route == "answer-stream":
                resp = c.post("/v1/answer", json={"question": f"what is {query}?",
                                                  "stream": True}, headers=headers)
                assert resp.status_code == 200, (where, resp.text)
                events = [json.loads(line[5:]) for line in resp.text.splitlines()
                          if line.startswith("data:")]
                shown = "".join(e.get("text", "") for e in events)
                for event in events:
                    for citation in event.get("citations", []):
                        assert citation["document_id"] in readable, where
                    if "answer" in event:  # done: the question's own words may be in reason
                        shown += event["answer"]["answer"]
                        for citation in event["answer"]["citations"]:
                            assert citation["document_id"] in readable, where
                assert not any(w in shown for w in hidden_words), where
            elif route == "chat":
                resp = c.post("/v1/chat/completions", headers=headers, json={
                    "model": "citewise", "messages": [
                        {"role": "user", "content": f"what is {query}?"}]})
                assert resp.status_code == 200, (where, resp.text)
                for citation in resp.json()["citations"]:
                    assert citation["document_id"] in readable, where
                content = resp.json()["choices"][0]["message"]["content"]
                assert not any(w in content for w in hidden_words), where
            elif route == "document":
                resp = c.get(f"/v1/documents/{target}", params={"include_content": "true"},
                             headers=headers)
                if target in readable:
                    assert resp.status_code == 200, (where, resp.text)
                else:
                    assert resp.status_code == 404, where
                    assert by_id[target][3] not in resp.text, where
            elif route == "sources":
                resp = c.get("/v1/sources", headers=headers)
                assert resp.status_code == 200, (where, resp.text)
                for source in resp.json()["sources"]:
                    expected = sum(1 for doc_id in readable if by_id[doc_id][0][0] ==
                                   source["name"])
                    assert source["documents"] == expected, where
                    assert source["last_run"] is None, where  # run figures count everything
            else:
                resp = c.get("/healthz", headers=headers)
                assert resp.json() == {"status": "ok"}, where
            checked[route] += 1
    assert sum(checked.values()) == CASES >= 1000
    assert all(checked.values()), checked
