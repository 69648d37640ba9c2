"""Benchmark of the Confluence connector against the loopback fake site (tests/fakes).

Usage (from the repository root)::

    python bench/bench_confluence.py [--pages 200] [--space-pages 2000] [--out bench/results]

Measured, for both API flavours (Cloud v2, Data Center v1):

1. **Throughput**: a first (full) run over ``--pages`` pages with realistic bodies (headings,
   a code macro, a table, a panel), through the connector *and* the pipeline (parse, chunk,
   embed, write). Pages per second, and the connector alone (the same sync without the
   pipeline) to show how much of it is the API.
2. **No-change incremental run over a ``--space-pages`` space**: the space is ingested once
   (short pages), then a second run with nothing changed is timed, with the HTTP requests it
   made. Then the same for a no-change *full listing* (the periodic sweep that catches
   deletions and permission changes), for comparison.

The client's rate limit is off (a loopback server), so times are the floor; the request counts
say what a real site costs at its rate limit (requests / requests_per_second).
Writes ``<out>/confluence.json`` and ``<out>/confluence.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

from citewise.api.composition import build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.connectors.base import SyncRequest  # noqa: E402
from citewise.connectors.confluence import ConfluenceConnector  # noqa: E402
from citewise.connectors.confluence.config import ConfluenceConfig  # noqa: E402
from tests.fakes.confluence_server import ConfluenceModel, FakeConfluence  # noqa: E402

BODY = """<h2>Overview</h2><p>Service {i} handles {topic} for the {team} team. It runs in
eu-prod-{c} and pages the on-call engineer when its error rate passes {n} percent.</p>
<ac:structured-macro ac:name="info"><ac:rich-text-body><p>Owner: team {team}.</p>
</ac:rich-text-body></ac:structured-macro>
<h2>Restart</h2><ac:structured-macro ac:name="code"><ac:parameter ac:name="language">bash
</ac:parameter><ac:plain-text-body><![CDATA[kubectl -n svc-{i} rollout restart deploy/svc-{i}
]]></ac:plain-text-body></ac:structured-macro>
<table><tbody><tr><th>Env</th><th>Replicas</th></tr><tr><td>prod</td><td>{n}</td></tr>
</tbody></table>"""
SHORT = "<p>Page {i} of the big space: owned by team {team}.</p>"
TOPICS = ["payments", "search", "checkout", "identity", "notifications", "billing", "catalog"]


def site(pages: int, body: str) -> ConfluenceModel:
    m = ConfluenceModel()
    m.add_space("ENG", "Engineering", [("group", "eng")])
    root = m.add_page("ENG", "Engineering home", "<p>Home.</p>")
    parents = [root]
    for i in range(pages - 1):
        parent = parents[i % len(parents)]
        pid = m.add_page("ENG", f"Service {i}", body.format(
            i=i, topic=TOPICS[i % 7], team=i % 13, c=i % 3, n=2 + i % 9), parent=parent,
            groups=("sre",) if i % 50 == 0 else ())
        if i % 20 == 0:
            parents.append(pid)
    return m


def connector(server: FakeConfluence, flavour: str, full_every_runs: int = 1000
              ) -> ConfluenceConnector:
    return ConfluenceConnector(ConfluenceConfig(
        base_url=server.cloud_url if flavour == "cloud" else server.dc_url, flavour=flavour,
        email_env="BENCH_CF_EMAIL", token_env="BENCH_CF_TOKEN" if flavour == "cloud"
        else "BENCH_CF_PAT", requests_per_second=0, page_size=100, full_every_runs=full_every_runs,
        full_every_hours=1000))


def timed_run(services, name: str, conn, **kw) -> dict:
    t = time.perf_counter()
    report = services.pipeline.run(name, "confluence", conn, batch_size=64, **kw)
    seconds = time.perf_counter() - t
    http = conn.last_http
    assert report.status in ("succeeded", "partial"), report.summary()
    return {"seconds": round(seconds, 3), "seen": report.counts.seen,
            "added": report.counts.added, "updated": report.counts.updated,
            "unchanged": report.counts.unchanged, "embedded": report.counts.chunks_embedded,
            "requests": http.requests if http else None, "status": report.status}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=100)
    ap.add_argument("--space-pages", type=int, default=2000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--no-pipeline-big", dest="pipeline_big", action="store_false",
                    help="skip ingesting the big space through the pipeline (slow: parsing)")
    args = ap.parse_args()
    os.environ.update(BENCH_CF_EMAIL="bot@example.com", BENCH_CF_TOKEN="cloud-secret-token",
                      BENCH_CF_PAT="dc-secret-pat")
    results: dict = {"pages": args.pages, "space_pages": args.space_pages,
                     "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                     "flavours": {}}
    # Connector alone over the big space first: cheap, and the figure that says what a
    # no-change run costs the Confluence site.
    for flavour in ("cloud", "datacenter"):
        server = FakeConfluence(site(args.space_pages, SHORT), max_limit=250).start()
        out = results["flavours"].setdefault(flavour, {})
        state = {}
        for key, request in (("big_connector_full", lambda st: SyncRequest(full=True)),
                             ("big_connector_incremental", lambda st: SyncRequest(state=st)),
                             ("big_connector_full_listing", lambda st: SyncRequest(
                                 state=st, full=True))):
            conn = connector(server, flavour)
            t = time.perf_counter()
            batches = list(conn.sync(request(state), 64))
            seconds = time.perf_counter() - t
            state = batches[-1].state or state
            out[key] = {"seen": sum(len(b.documents) for b in batches),
                        "seconds": round(seconds, 3), "requests": conn.last_http.requests,
                        "embedded": "-"}
        server.stop()
        print(flavour, json.dumps(out), file=sys.stderr)
        write(args.out, results)
    with tempfile.TemporaryDirectory() as tmp:
        services = build_services(Settings(data_dir=Path(tmp) / "data"))
        services.pipeline.dense.warm_up()  # the model load is not the connector's cost
        try:
            for flavour in ("cloud", "datacenter"):
                out = results["flavours"][flavour]
                # Throughput through connector + pipeline.
                server = FakeConfluence(site(args.pages, BODY), max_limit=100).start()
                first = timed_run(services, f"tp-{flavour}", connector(server, flavour))
                first["pages_per_s"] = round(first["seen"] / first["seconds"], 1)
                out["full_ingest"] = first
                out["no_change_incremental_small"] = timed_run(
                    services, f"tp-{flavour}", connector(server, flavour))
                server.stop()
                print(flavour, json.dumps(out), file=sys.stderr)
                write(args.out, results)
            if args.pipeline_big:
                # The big space through the pipeline (one flavour: parsing 2,000 pages is slow).
                server = FakeConfluence(site(args.space_pages, SHORT), max_limit=250).start()
                out = results["flavours"]["cloud"]
                out["big_first_run"] = timed_run(services, "big", connector(server, "cloud"))
                write(args.out, results)
                out["no_change_incremental"] = timed_run(services, "big",
                                                         connector(server, "cloud"))
                write(args.out, results)
                # The periodic full listing (what catches deletions and restriction changes),
                # not --force: unchanged pages are fetched and compared, never re-parsed.
                out["no_change_full_listing"] = timed_run(
                    services, "big", connector(server, "cloud", full_every_runs=1))
                server.stop()
                write(args.out, results)
        finally:
            services.close()


LABELS = (
    ("big_connector_full", "connector only: {n}-page space, full pass"),
    ("big_connector_incremental", "connector only: {n}-page space, no-change incremental"),
    ("big_connector_full_listing", "connector only: {n}-page space, no-change full listing"),
    ("full_ingest", "connector + pipeline: first run"),
    ("no_change_incremental_small", "connector + pipeline: no-change incremental"),
    ("big_first_run", "connector + pipeline: {n}-page space, first run"),
    ("no_change_incremental", "connector + pipeline: {n}-page space, no-change incremental"),
    ("no_change_full_listing", "connector + pipeline: {n}-page space, no-change full listing"),
)


def write(out_dir: Path, results: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "confluence.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# Confluence connector benchmark", "",
        f"Fake Confluence on loopback, client rate limit off; {results['machine']}.", "",
        "| flavour | measure | pages | seconds | pages/s | HTTP requests | chunks embedded |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for flavour, out in results["flavours"].items():
        for key, label in LABELS:
            if key not in out:
                continue
            r = out[key]
            pps = round(r["seen"] / r["seconds"], 1) if r["seconds"] else "-"
            lines.append(f"| {flavour} | {label.format(n=results['space_pages'])} | {r['seen']} "
                         f"| {r['seconds']} | {pps} | {r['requests']} | {r['embedded']} |")
    (out_dir / "confluence.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
