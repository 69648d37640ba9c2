"""citewise as a cluster on this machine (issue 32): two ``citewise serve`` replicas and a
``citewise ingest`` worker, separate processes on loopback, sharing a real PostgreSQL with
pgvector (every store and the vectors) and moto's S3 server (the blobs). Each process has a data
folder of its own for what stays local, and all are configured by ``CITEWISE_*`` variables only
(``tests/cluster.py``). Answers are written by a model on loopback (``tests/fakes/
openai_provider.py``), so that a streamed answer lasts long enough to kill a replica under it.

One cluster serves the module: starting a replica loads the model, tens of seconds on two cores.
Its start is itself the first test (both replicas at the same moment on an empty database). The
replicas also run the ingest jobs they accept over HTTP (the shared queue: one of them takes
each). The tests run in file order and the destructive ones come last: the worker killed
mid-run, the database restarted under load, and replica A killed mid-stream (A stays dead after
it). The figures the closing note quotes are printed, each line starting with ``cluster:``
(``pytest -s``).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from tests.cluster import Cluster, ClusterConfig, Replica, is_problem, shown
from tests.conftest import SHARED
from tests.fakes.openai_provider import OpenAIProvider, cite_first_passage
from tests.kb import REDIS, SECRET, SECRET_WORDS, write, write_kb

pytestmark = pytest.mark.integration

SEARCH_PER_MINUTE = 30  # every principal's search rate in this cluster
REVOCATION_SECONDS = 2.0  # "effective on every replica within a second or two"
OUTAGE_SECONDS = 15.0  # the database restarted under load: a quick restart or failover
RECOVERY_SECONDS = 30.0  # after the database is back, each replica serves again within this
USAGE_FLUSH_SECONDS = 1.0  # api/metering/usage.py writes usage rows every second
BIG_CORPUS = SHARED / "corpora" / "prometheus-operator-runbooks"
REDIS_QUESTION = "How do I fail over the Redis cache?"


def report(line: str) -> None:
    print(f"cluster: {line}", flush=True)


def user(name: str, *groups: str) -> dict[str, str]:
    """Local mode's identity headers (the replicas bind 127.0.0.1 without authentication):
    each test names principals of its own, so their rate allowances never meet."""
    headers = {"X-Citewise-User": name}
    if groups:
        headers["X-Citewise-Groups"] = ",".join(groups)
    return headers


def anyone() -> dict[str, str]:
    """A principal used once: for load, which must never meet a rate limit."""
    return user(f"load-{uuid.uuid4().hex[:10]}")


def first_held(checks: dict[str, Callable[[], bool]], since: float, timeout: float
               ) -> dict[str, float | None]:
    """For each named check, polled in turn, the seconds from ``since`` (a ``monotonic()``)
    until it first held; None for one that did not within ``timeout``."""
    held: dict[str, float | None] = dict.fromkeys(checks)
    while time.monotonic() - since <= timeout and None in held.values():
        for name, check in checks.items():
            if held[name] is None and check():
                held[name] = time.monotonic() - since
        time.sleep(0.02)
    return held


def wait_until(check: Callable[[], bool], timeout: float, step: float = 0.05) -> float | None:
    """Seconds until ``check()`` held, or None if it did not within ``timeout``."""
    started = time.monotonic()
    while True:
        if check():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            return None
        time.sleep(step)


@dataclass
class World:
    cluster: Cluster
    a: Replica
    b: Replica
    llm: OpenAIProvider
    postgres: object  # tests/postgres_server.PostgresServer
    database_url: str
    sources: Path  # the worker's folders to ingest
    started_s: float
    pg_log_from: int  # the server log's size before the replicas started
    kb: Path = field(init=False)

    def __post_init__(self) -> None:
        self.kb = self.sources / "kb"

    @property
    def replicas(self) -> tuple[Replica, Replica]:
        return self.a, self.b

    def sql(self, query: str, params: tuple = ()) -> list[dict]:
        """The test's own look at the database (never what the code under test uses)."""
        with psycopg.connect(self.database_url, autocommit=True, connect_timeout=5,
                             row_factory=dict_row) as conn:
            return conn.execute(query, params).fetchall()

    def ingest(self, path: Path, name: str, *, partial: bool = False,
               timeout: float = 600.0) -> dict:
        """``citewise ingest PATH`` by the worker, to its end; its one report. ``partial``: a
        file the parsers refuse is the corpus's own (exit 3), not the cluster's failure."""
        done = self.cluster.run("ingest", str(path), "--name", name, "--readers", "public",
                                "--json", timeout=timeout)
        assert done.returncode in ((0, 3) if partial else (0,)), shown(done)
        return json.loads(done.stdout)[0]

    def diagnose(self) -> str:
        return self.cluster.logs()


@pytest.fixture(scope="module")
def world(request, tmp_path_factory, postgres, s3_server):
    import boto3

    root = tmp_path_factory.mktemp("cluster")
    database_url = postgres.create_database()
    # Every DDL statement on this database goes to the server's log: what shows that the two
    # replicas starting together created each table once.
    database = database_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{database}" SET log_statement = \'ddl\'')
    bucket = f"citewise-cluster-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                 aws_access_key_id="test",
                 aws_secret_access_key="test").create_bucket(Bucket=bucket)
    llm = OpenAIProvider().start()
    config = ClusterConfig(database_url, s3_server, bucket, extra={
        "CITEWISE_LLM_BASE_URL": llm.base_url, "CITEWISE_LLM_MODEL": llm.model,
        "CITEWISE_RATE_SEARCH_PER_MINUTE": str(SEARCH_PER_MINUTE),
        "CITEWISE_DATABASE_TIMEOUT": "2",  # an outage is said in 2 s, not the default 5
        "CITEWISE_INGEST_ALLOWED_PATHS": str(root / "sources"),  # jobs over HTTP read there
    })
    cluster = Cluster(root, config)
    a, b = cluster.replica("replica-a"), cluster.replica("replica-b")
    pg_log_from = postgres.log.stat().st_size if postgres.log.exists() else 0
    failed_before = request.session.testsfailed
    try:
        started = time.monotonic()
        cluster.start_together([a, b])
        world = World(cluster, a, b, llm, postgres, database_url, root / "sources",
                      time.monotonic() - started, pg_log_from)
        write_kb(world.kb)
        yield world
    finally:
        if request.session.testsfailed > failed_before:
            print(f"\n----- the cluster's logs -----\n{cluster.logs()}")
        cluster.close()
        llm.stop()


@pytest.fixture(scope="module")
def ingested(world) -> dict:
    """The small knowledge base (``tests/kb.py``), ingested once by the worker."""
    started = time.monotonic()
    run = world.ingest(world.kb, "kb")
    run["wall_s"] = time.monotonic() - started
    return run


# Together -------------------------------------------------------------------------------------
def test_replicas_started_together_on_an_empty_database_migrate_once(world):
    versions = {row["store"]: row["version"] for row in
                world.sql("SELECT store, version FROM schema_versions ORDER BY store")}
    assert len(versions) >= 5 and all(v >= 1 for v in versions.values()), versions
    for r in world.replicas:  # local mode on loopback: the admin's /healthz
        health = httpx.get(f"{r.url}/healthz", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok", \
            f"{r.name}: {health.text}\n{world.diagnose()}"
        database = health.json()["database"]
        assert database["backend"] == "postgresql" and database["reachable"], database
        assert database["schema_versions"] == versions, (database, versions)

    # And what the operator sees: `citewise --version` reads the live schema of the database.
    version = world.cluster.run("--version", folder="operator")
    assert version.returncode == 0, shown(version)
    assert "database: postgresql" in version.stdout and "schema: " + ", ".join(
        f"{store} {v}" for store, v in sorted(versions.items())) in version.stdout, \
        version.stdout

    with world.postgres.log.open("rb") as f:
        f.seek(world.pg_log_from)
        log = f.read().decode(errors="replace")
    errors = [line for line in log.splitlines() if "ERROR:" in line or "FATAL:" in line]
    assert errors == [], "the server logged errors while the replicas started:\n" + \
        "\n".join(errors)
    # Each table is created once, by one replica: the other found it migrated (a migration run
    # twice would log its CREATE TABLE twice, or fail on the second and log an ERROR).
    created = re.findall(r"CREATE\s+TABLE\s+(?!IF\s+NOT\s+EXISTS)([\w.\"]+)", log, re.I)
    twice = sorted({t for t in created if created.count(t) > 1})
    assert created and twice == [], f"tables created more than once: {twice}"
    for r in world.replicas:
        text = r.log.read_text(errors="replace")
        for sign in ("Traceback", "already exists", "duplicate key", "UniqueViolation"):
            assert sign not in text, f"{r.name}'s log says {sign!r}:\n{r.output()}"
    report(f"replicas A and B started at the same moment on an empty database, both healthy "
           f"{world.started_s:.1f} s later; schema_versions {versions}; {len(created)} tables "
           f"created, each once; 0 errors in the PostgreSQL log")


# Shared state ---------------------------------------------------------------------------------
def test_a_document_ingested_by_the_worker_is_found_through_both_replicas(world, ingested):
    assert ingested["status"] == "succeeded", ingested
    assert ingested["added"] == 5, ingested
    found = {}
    for r in world.replicas:
        resp = httpx.get(f"{r.url}/v1/search", timeout=30, headers=user("finder"),
                         params={"q": "Sentinel failover of the Redis primary", "top_k": 3})
        assert resp.status_code == 200, f"{r.name}: {resp.text}\n{world.diagnose()}"
        top = resp.json()["results"][0]
        assert top["path"] == REDIS, resp.json()
        found[r.name] = top["document_id"]
    assert found["replica-a"] == found["replica-b"]
    report(f"the worker ingested 5 documents in {ingested['wall_s']:.1f} s (process start "
           f"included); both replicas find {REDIS} first")


def test_a_key_created_or_revoked_through_the_cli_is_honoured_by_both(world):
    secret = world.cluster.create_key("cluster-ci", "search", "--principal", "user:ci-bot")
    created = time.monotonic()  # the command has returned: the key is in the database
    bearer = {"Authorization": f"Bearer {secret}"}

    def status(r: Replica) -> int:
        return httpx.get(f"{r.url}/v1/me", headers=bearer, timeout=10).status_code

    accepted = first_held({r.name: lambda r=r: status(r) == 200 for r in world.replicas},
                          created, 10.0)
    assert None not in accepted.values(), f"a new key was not accepted: {accepted}"
    me = httpx.get(f"{world.b.url}/v1/me", headers=bearer, timeout=10).json()
    assert me["principal"] == "user:ci-bot", me

    done = world.cluster.run("keys", "revoke", "cluster-ci", folder="operator")
    assert done.returncode == 0, shown(done)
    revoked = time.monotonic()
    refused = first_held({r.name: lambda r=r: status(r) == 401 for r in world.replicas},
                         revoked, 10.0)
    assert None not in refused.values(), f"a revoked key is still accepted: {refused}"
    assert max(refused.values()) <= REVOCATION_SECONDS, refused
    # And it stays refused: no replica has an older view of it left to serve.
    assert {status(r) for r in world.replicas for _ in range(5)} == {401}
    report("key created through the CLI accepted by A in "
           f"{accepted['replica-a']:.2f} s, B in {accepted['replica-b']:.2f} s; revoked through "
           f"the CLI, refused (401) by A in {refused['replica-a']:.2f} s, B in "
           f"{refused['replica-b']:.2f} s (limit {REVOCATION_SECONDS} s)")


def test_a_conversation_started_on_a_continues_on_b(world, ingested):
    me = user("conversing")
    first = httpx.post(f"{world.a.url}/v1/answer", headers=me, timeout=60,
                       json={"question": REDIS_QUESTION})
    assert first.status_code == 200, first.text
    conversation = first.json()["conversation_id"]
    follow_up = httpx.post(f"{world.b.url}/v1/answer", headers=me, timeout=60,
                           json={"question": "and how do I see which node is the primary?",
                                 "conversation_id": conversation})
    assert follow_up.status_code == 200, follow_up.text
    assert follow_up.json()["conversation_id"] == conversation
    assert follow_up.json()["rewritten_by"] in ("rule", "model"), follow_up.json()
    seen = httpx.get(f"{world.a.url}/v1/conversations/{conversation}", headers=me, timeout=30)
    assert seen.status_code == 200, seen.text
    turns = seen.json()["turns"]
    assert [t["turn"] for t in turns] == [1, 2]
    assert [t["answer_id"] for t in turns] == [first.json()["answer_id"],
                                               follow_up.json()["answer_id"]]
    # Still its owner's only, on either replica.
    stranger = httpx.get(f"{world.b.url}/v1/conversations/{conversation}",
                         headers=user("stranger"), timeout=30)
    assert stranger.status_code == 404, stranger.text
    report(f"conversation started on A continued on B (asked there as "
           f"{follow_up.json()['question']!r}); A shows both turns")


def test_one_principal_has_one_rate_limit_across_replicas(world):
    me = user("rate-limited")
    statuses: list[tuple[str, int]] = []
    started = time.monotonic()
    for i in range(2 * SEARCH_PER_MINUTE):
        r = world.replicas[i % 2]
        resp = httpx.get(f"{r.url}/v1/search", params={"q": "disk almost full"}, headers=me,
                         timeout=30)
        assert resp.status_code in (200, 429), resp.text
        if resp.status_code == 429:
            assert is_problem(resp, 429) and int(resp.headers["Retry-After"]) >= 1, resp.text
        statuses.append((r.name, resp.status_code))
    elapsed = time.monotonic() - started
    allowed = sum(1 for _, s in statuses if s == 200)
    # Buckets start full and refill smoothly: the limit, plus what refilled meanwhile.
    refilled = math.ceil(elapsed * SEARCH_PER_MINUTE / 60)
    assert SEARCH_PER_MINUTE <= allowed <= SEARCH_PER_MINUTE + refilled + 1, \
        f"{allowed} of {len(statuses)} allowed in {elapsed:.1f} s: {statuses}"
    refusing = {name for name, s in statuses if s == 429}
    assert refusing == {"replica-a", "replica-b"}, statuses
    report(f"rate limit {SEARCH_PER_MINUTE}/min for one principal, {len(statuses)} searches "
           f"alternating A and B in {elapsed:.1f} s: {allowed} allowed, "
           f"{len(statuses) - allowed} refused (429) by both replicas (per-replica buckets "
           f"would have allowed {2 * SEARCH_PER_MINUTE})")


def test_a_cached_answer_is_not_served_after_the_worker_changes_the_document(world, ingested):
    me = user("cache-asker")

    def ask(r: Replica) -> httpx.Response:
        resp = httpx.post(f"{r.url}/v1/answer", headers=me, timeout=60,
                          json={"question": REDIS_QUESTION})
        assert resp.status_code == 200, resp.text
        assert not resp.json()["abstained"], resp.json()
        return resp

    first = ask(world.a)
    assert first.json()["cached"] is False
    again = ask(world.b)  # one cache for the replicas: A's answer is B's hit
    assert again.json()["cached"] is True and again.headers["X-Citewise-Cache"] == "hit"
    cited = {c["document_id"] for c in again.json()["citations"]}

    redis = world.kb / REDIS
    write(world.kb, REDIS, redis.read_text().replace(
        "Then restart the checkout pods",
        "Page the platform lead before promoting anything. Then restart the checkout pods"))
    run = world.ingest(world.kb, "kb")
    assert run["updated"] == 1, run

    after = ask(world.b)
    assert after.json()["cached"] is False and after.headers["X-Citewise-Cache"] == "miss", \
        after.json()
    quotes = " ".join(c.get("quote") or "" for c in after.json()["citations"])
    report(f"answer cached by A served by B as a hit (citing {len(cited)} documents); after the "
           f"worker updated {REDIS}, B answered afresh (cache miss"
           f"{', quoting the new sentence' if 'platform lead' in quotes else ''})")


def test_a_restricted_document_stays_invisible_to_a_non_reader_through_both(world, ingested):
    question = "How are the payment provider API keys rotated?"
    for r in world.replicas:
        reader = httpx.get(f"{r.url}/v1/search", params={"q": question, "top_k": 5},
                           headers=user("sec-engineer", "security"), timeout=30)
        assert reader.status_code == 200 and \
            reader.json()["results"][0]["path"] == SECRET, reader.text
        searched = httpx.get(f"{r.url}/v1/search", params={"q": question, "top_k": 10},
                             headers=user("visitor"), timeout=30)
        answered = httpx.post(f"{r.url}/v1/answer", json={"question": question},
                              headers=user("visitor"), timeout=60)
        for resp in (searched, answered):
            assert resp.status_code == 200, resp.text
            assert SECRET not in resp.text, f"{r.name} showed {SECRET} to a non-reader"
            leaked = [w for w in SECRET_WORDS if w in resp.text.lower()]
            assert leaked == [], f"{r.name} leaked {leaked}: {resp.text}"
    report(f"{SECRET} found by a member of group security and invisible to a non-reader "
           "(search and answer) through both replicas")


def test_an_ingest_job_accepted_by_one_replica_is_run_once_and_read_on_the_other(world,
                                                                                ingested):
    notes = world.sources / "notes"
    write(notes, "kettle.md", "# Kettle descaling\n\nDescale the office kettle every Friday "
          "with citric acid: two spoons, boil, rinse twice.\n")
    write(notes, "plants.md", "# Office plants\n\nWater the ficus on Mondays and the cactus "
          "once a month; the facilities rota lists who does it.\n")
    accepted = httpx.post(f"{world.a.url}/v1/ingest/jobs", headers=user("job-submitter"),
                          json={"path": str(notes), "name": "notes", "readers": ["public"]},
                          timeout=30)
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["id"]

    def job_on_b() -> dict:
        resp = httpx.get(f"{world.b.url}/v1/ingest/jobs/{job_id}", timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.json()

    took = wait_until(lambda: job_on_b()["status"] in ("done", "failed"), 180.0, step=0.2)
    job = job_on_b()
    assert took is not None and job["status"] == "done", job
    assert [(r["source"], r["added"]) for r in job["reports"]] == [("notes", 2)], job
    # One worker ran it: one run of the source, by one of the two replicas.
    runs = httpx.get(f"{world.a.url}/v1/ingest/runs", params={"source": "notes"},
                     timeout=30).json()["runs"]
    assert len(runs) == 1, runs
    by = {r.pid: r.name for r in world.replicas}.get(runs[0]["pid"])
    assert by is not None, (runs, {r.name: r.pid for r in world.replicas})
    for r in world.replicas:
        found = httpx.get(f"{r.url}/v1/search", params={"q": "descale the kettle"},
                          headers=user("kettle-user"), timeout=30).json()["results"]
        assert found and found[0]["path"] == "kettle.md", found
    report(f"ingest job accepted by A, run once (by {by}), read as done on B {took:.1f} s "
           "later; both replicas find its documents")


# Crashes --------------------------------------------------------------------------------------
def big_corpus(into: Path) -> tuple[Path, str]:
    """A corpus whose run takes several seconds: a shared runbook corpus if there is one, else
    a generated folder."""
    if BIG_CORPUS.is_dir():
        shutil.copytree(BIG_CORPUS, into)
        return into, f"{BIG_CORPUS.name} (shared corpora)"
    for n in range(160):
        write(into, f"service-{n:03d}.md", f"# Service {n} runbook\n\n" + "\n\n".join(
            f"## Step {k}\n\nOn service {n}, step {k}: drain node pool {n * 7 + k}, rotate "
            f"the certificate bundle {k}, then compare the error budget of window {n + k} "
            f"with the dashboard of region {k % 5}. Escalate to rota {n % 9} if it burns."
            for k in range(6)))
    return into, f"160 generated runbooks ({BIG_CORPUS} is absent)"


def advisory_locks(world: World) -> set[tuple]:
    rows = world.sql("SELECT classid, objid, objsubid FROM pg_locks WHERE locktype = "
                     "'advisory' AND granted AND database = (SELECT oid FROM pg_database "
                     "WHERE datname = current_database())")
    return {(r["classid"], r["objid"], r["objsubid"]) for r in rows}


def documents_of(world: World, r: Replica, source: str) -> int:
    resp = httpx.get(f"{r.url}/v1/sources", headers=anyone(), timeout=30)
    assert resp.status_code == 200, resp.text
    return next((s["documents"] for s in resp.json()["sources"] if s["name"] == source), 0)


def test_worker_killed_mid_run_releases_the_lock_and_the_next_run_converges(world, ingested):
    corpus, described = big_corpus(world.sources / "big")
    before = advisory_locks(world)
    worker = world.cluster.background("worker-killed", "ingest", str(corpus), "--name", "big",
                                      "--readers", "public")
    # Mid-run: it holds the run lock and has written some of the corpus, not all.
    holding = wait_until(lambda: bool(advisory_locks(world) - before) or not worker.alive,
                         180.0, step=0.1)
    assert holding is not None and worker.alive, \
        f"the worker took no advisory lock (is the run lock still a file?):\n{worker.output()}"
    run_lock = advisory_locks(world) - before
    wait_until(lambda: documents_of(world, world.a, "big") >= 10 or not worker.alive, 120.0,
               step=0.2)
    written = documents_of(world, world.a, "big")
    assert worker.alive, f"the run ended before it could be killed ({written} documents " \
        f"written): use a larger corpus\n{worker.output()}"
    worker.kill()
    released = wait_until(lambda: not (advisory_locks(world) & run_lock), 10.0)
    assert released is not None, f"the run lock {run_lock} is still held after kill -9"

    started = time.monotonic()
    run = world.ingest(corpus, "big", partial=True)
    took = time.monotonic() - started
    counts = run
    assert run["status"] in ("succeeded", "partial") and counts["failed"] == len(run["errors"]), run
    indexable = counts["seen"] - counts["failed"]
    assert written < indexable, (written, run)
    verify = world.cluster.run("verify", "--json", timeout=300)
    assert verify.returncode == 0, shown(verify)
    listed = {r.name: documents_of(world, r, "big") for r in world.replicas}
    assert listed == {"replica-a": indexable, "replica-b": indexable}, (listed, run)
    refused = [e["external_id"] for e in run["errors"]]
    report(f"worker killed (-9) mid-run over {described}, {written} documents written; its "
           f"advisory lock released {released:.2f} s later; the next run ({took:.1f} s: "
           f"{counts['added']} added, {counts['updated']} updated, {counts['unchanged']} "
           f"unchanged, {counts['chunks_embedded']} chunks embedded"
           f"{f', {len(refused)} refused by the parsers: {refused}' if refused else ''}) "
           f"converged: both replicas list {indexable} documents, `citewise verify` exit 0")


@dataclass
class Outcome:
    replica: str
    started: float
    ended: float
    status: int | None  # None: no HTTP answer at all
    problem: bool
    detail: str = ""


class Load:
    """Searches by fresh principals against each replica, one thread per replica, until
    stopped; every outcome kept with its times."""

    def __init__(self, replicas: tuple[Replica, ...], timeout: float = 15.0) -> None:
        self.replicas = replicas
        self.timeout = timeout
        self.outcomes: list[Outcome] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(r,), daemon=True)
                         for r in replicas]

    def _run(self, r: Replica) -> None:
        with httpx.Client(timeout=self.timeout) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    resp = client.get(f"{r.url}/v1/search", headers=anyone(),
                                      params={"q": "replica lag on the primary database"})
                    outcome = Outcome(r.name, started, time.monotonic(), resp.status_code,
                                      is_problem(resp, resp.status_code),
                                      resp.text[:300] if resp.status_code != 200 else "")
                except httpx.HTTPError as e:
                    outcome = Outcome(r.name, started, time.monotonic(), None, False, repr(e))
                self.outcomes.append(outcome)
                time.sleep(0.02)

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.timeout + 5)

    def between(self, start: float, end: float, replica: str | None = None) -> list[Outcome]:
        return [o for o in self.outcomes if o.started >= start and o.ended <= end
                and (replica is None or o.replica == replica)]


def test_the_database_restarted_under_load_is_503_then_recovered_without_a_restart(world,
                                                                                    ingested):
    pids = {r.name: r.pid for r in world.replicas}
    health_during: dict[str, tuple[int, str]] = {}
    with Load(world.replicas) as load:
        time.sleep(2.0)
        down = time.monotonic()
        world.postgres.stop("immediate")
        try:
            time.sleep(3.0)
            for r in world.replicas:
                h = httpx.get(f"{r.url}/healthz", timeout=15)
                health_during[r.name] = (h.status_code, h.text)
            time.sleep(max(0.0, down + OUTAGE_SECONDS - time.monotonic()))
        finally:
            world.postgres.start()
        up = time.monotonic()
        # The first request answered 200 after the database was back, per replica.
        recovered = first_held(
            {r.name: lambda r=r: any(o.status == 200 for o in load.between(up, time.monotonic(),
                                                                           r.name))
             for r in world.replicas}, up, RECOVERY_SECONDS)
        time.sleep(3.0)
        steady = time.monotonic() - 2.0
    assert all(o.status == 200 for o in load.between(0, down)), \
        [o for o in load.between(0, down) if o.status != 200][:5]
    # During the outage (after the requests in flight at its start): 503 problem documents,
    # from both replicas, and nothing else: never a 500, a hang or a dropped connection.
    outage = load.between(down + 0.5, up)
    assert {o.replica for o in outage} == {"replica-a", "replica-b"}, outage
    wrong = [o for o in outage if o.status != 503 or not o.problem]
    assert wrong == [], wrong[:5]
    assert not [o for o in load.outcomes if o.status is None or o.status >= 500 and
                o.status != 503], "a replica dropped a connection or answered 5xx other than 503"
    for name, (code, body) in health_during.items():
        # Alive (a probe must not restart a replica for the database's outage), and to an
        # admin it says the database is away.
        assert code == 200, f"{name}: {code} {body}"
        said = json.loads(body)
        assert said["status"] != "ok" and said["database"]["reachable"] is False, \
            f"{name}'s /healthz said all is well while the database was away: {body}"
    assert None not in recovered.values(), \
        f"a replica did not recover within {RECOVERY_SECONDS} s: {recovered}\n{world.diagnose()}"
    recovered = {name: min(o.ended for o in load.between(up, time.monotonic(), name)
                           if o.status == 200) - up for name in recovered}
    after = load.between(steady, time.monotonic())
    assert after and all(o.status == 200 for o in after), [o for o in after if o.status != 200]
    assert {r.name: r.pid for r in world.replicas} == pids and all(r.alive for r in
                                                                   world.replicas)
    counts = {name: len(load.between(down + 0.5, up, name)) for name in pids}
    report(f"database stopped (immediate) for {up - down:.1f} s under load: "
           f"{counts['replica-a']} requests to A and {counts['replica-b']} to B in the outage, "
           f"all 503 problem documents; their /healthz said the database unreachable; "
           f"served again "
           f"{recovered['replica-a']:.2f} s (A) and {recovered['replica-b']:.2f} s (B) after "
           f"it was back, same processes; {len(load.outcomes)} requests in all, none dropped")


LONG_REPLY = ("Fail over the cache as the runbook says [1]. " * 12).strip()


def test_replica_a_killed_mid_stream_b_keeps_serving_and_nothing_is_lost(world, ingested):
    me = user("streamer")
    completed = 0

    def call(method: str, r: Replica, path: str, **kwargs) -> httpx.Response:
        nonlocal completed
        resp = httpx.request(method, f"{r.url}{path}", headers=me, timeout=60, **kwargs)
        assert resp.status_code == 200, f"{r.name} {path}: {resp.text}"
        completed += 1
        return resp

    first = call("POST", world.a, "/v1/answer", json={"question": REDIS_QUESTION}).json()
    conversation = first["conversation_id"]
    second = call("POST", world.a, "/v1/answer", json={
        "question": "what do I restart afterwards?", "conversation_id": conversation}).json()
    other = call("POST", world.b, "/v1/answer",
                 json={"question": "Postgres disk almost full: what do I delete?"}).json()
    for r in (world.a, world.a, world.b):
        call("GET", r, "/v1/search", params={"q": "onboarding access requests"})
    last_completed = time.monotonic()

    # The streamed answer comes slowly (a chunk every 0.15 s, some 70 of them); the rewrite
    # of the follow-up, a plain completion, is answered at once (its reply is not a one-line
    # question, so the rule rewrites it).
    world.llm.reply = lambda body: LONG_REPLY if body.get("stream") else \
        cite_first_passage(body)
    world.llm.delay_s, world.llm.mode = 0.15, "slow"
    events: list[str] = []
    killed_at = None
    try:
        with Load((world.b,)) as load, httpx.stream(
                "POST", f"{world.a.url}/v1/answer", headers=me, timeout=60,
                json={"question": "and how do I check which node is primary?",
                      "conversation_id": conversation, "stream": True}) as stream:
            assert stream.status_code == 200
            try:
                for line in stream.iter_lines():
                    if line.startswith("event: "):
                        events.append(line[7:])
                    # After a delta, and once A's usage of the completed requests was flushed.
                    if killed_at is None and "delta" in events and \
                            time.monotonic() - last_completed > 2 * USAGE_FLUSH_SECONDS + 0.5:
                        killed_at = time.monotonic()
                        world.a.kill()
            except httpx.HTTPError:
                pass  # the connection died with A, as it must
            assert killed_at is not None, f"the stream ended before A could be killed: {events}"
            time.sleep(3.0)
    finally:
        world.llm.reply, world.llm.mode = cite_first_passage, "ok"
    assert "done" not in events, events
    assert not world.a.alive
    around = load.between(killed_at - 1.0, killed_at + 3.0)
    assert around and all(o.status == 200 for o in around), \
        [o for o in around if o.status != 200][:5]

    # The conversation goes on at B from its last completed turn: the interrupted one is not
    # kept, none is kept twice.
    third = call("POST", world.b, "/v1/answer", json={
        "question": "and how do I check which node is primary?",
        "conversation_id": conversation}).json()
    turns = call("GET", world.b, f"/v1/conversations/{conversation}").json()["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3], turns
    assert [t["answer_id"] for t in turns] == \
        [first["answer_id"], second["answer_id"], third["answer_id"]]
    mine = call("GET", world.b, "/v1/conversations").json()["conversations"]
    assert sorted((c["id"], c["turns"]) for c in mine) == \
        sorted([(conversation, 3), (other["conversation_id"], 1)]), mine
    # Usage: a row for every request that completed, on A (flushed before the kill) or B,
    # and none twice; the killed stream has none.
    usage = httpx.get(f"{world.b.url}/v1/usage", params={"since": "1h"}, timeout=30)
    assert usage.status_code == 200, usage.text
    rows = {row["principal"]: row["requests"] for row in usage.json()["rows"]}
    assert rows.get("user:streamer") == completed, (rows, completed)
    report(f"replica A killed (-9) mid-stream after {events.count('delta')} deltas; B served "
           f"all {len(around)} requests in the 4 s around the kill; the conversation went on "
           f"at B as turn 3 (turns 1-3, none lost or doubled); usage holds exactly the "
           f"{completed} requests that completed")
