"""The memory a built shard takes in a process of its own: RSS after load and after searches,
with the vectors in RAM or on disk, searching the int8 copies or the float vectors.

``bench_ann.py``'s RSS includes the benchmark's numpy copies of every point; this opens a shard
that ``bench_ann.py --work`` kept (``--shard``) in a fresh Python process per variant, with
nothing else loaded (no model: the queries are stored points' vectors, perturbed), so the
figures are the engine's. Each variant: RSS after ``EdgeShard.load``, then after ``--queries``
dense queries at limit 50 with the readers filter of bench_scale's caller (public + team-1) and
without. ``Memory.Cold`` for the dense vectors is given at load (the engine takes it for the
existing segments: the stored config says ``"memory": "cold"``); the variants run in the order
given and the last one's placement stays stored, so ``cold`` goes last.

    nice -n 10 .venv/bin/python bench/bench_ann_rss.py --shard /kept/m16-ef100-int8-1024920
    # -> bench/results/ann-1m-rss.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {  # name: (vectors on disk, search the int8 copies)
    "vectors cached, int8 search": (False, True),
    "vectors cached, float search": (False, False),
    "vectors cold (on disk), int8 search": (True, True),
}

CHILD = r"""
import json, sys, time
import numpy as np
import qdrant_edge as qe

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024)

path, cold, int8, queries, ef = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1", \
    int(sys.argv[4]), int(sys.argv[5])
base = rss()
config = None
if cold:
    config = qe.EdgeConfig(vectors={"dense": qe.EdgeVectorParams(
        size=384, distance=qe.Distance.Cosine, memory=qe.Memory.Cold)})
t = time.perf_counter()
shard = qe.EdgeShard.load(path, config)
load_s = time.perf_counter() - t
after_load = rss()
rng = np.random.default_rng(3)
ids = [int(i) for i in rng.choice(shard.info().points_count, queries, replace=False)]
records = shard.retrieve(ids, with_payload=False, with_vector=True)
vectors = []
for r in records:
    v = np.asarray(r.vector["dense"], dtype=np.float32) + rng.normal(0, 0.03, 384)
    vectors.append((v / np.linalg.norm(v)).tolist())
q = qe.QuantizationSearchParams(rescore=True, oversampling=2.0) if int8 else \
    qe.QuantizationSearchParams(ignore=True)
flt = qe.Filter(must=[qe.FieldCondition(key="readers",
                                        match=qe.MatchAny(["public", "group:team-1"]))])
ms = []
for v in vectors:
    for f in (None, flt):
        t = time.perf_counter()
        shard.query(qe.QueryRequest(limit=50, query=qe.Query.Nearest(v, using="dense"),
                                    filter=f, params=qe.SearchParams(hnsw_ef=ef, quantization=q),
                                    with_payload=False))
        ms.append((time.perf_counter() - t) * 1000)
ms.sort()
p50, p95 = ms[len(ms) // 2], ms[int(len(ms) * 0.95)]
print(json.dumps({"python_mib": base, "load_s": round(load_s, 1), "after_load_mib": after_load,
                  "after_search_mib": rss(), "queries": len(ms),
                  "p50_ms": round(p50, 2), "p95_ms": round(p95, 2)}))
shard.close()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shard", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--name", default="ann-1m-rss")
    args = parser.parse_args()
    if not (args.shard / "edge_config.json").exists():
        print(f"skipping: {args.shard} holds no shard (run bench_ann.py --work first)",
              file=sys.stderr)
        return
    results: dict = {"when": datetime.now(UTC).isoformat(timespec="seconds"),
                     "shard": str(args.shard), "ef": args.ef,
                     "load_at_start": [round(x, 2) for x in os.getloadavg()], "variants": {}}
    results["segment_storage"] = sorted(
        json.loads(f.read_text())["config"]["vector_data"]["dense"]["storage_type"]
        for f in (args.shard / "segments").glob("*/segment.json"))
    built = args.shard / "built.json"
    if built.exists():
        results["shard_files_mib"] = json.loads(built.read_text()).get("files_mib")
    for name, (cold, int8) in VARIANTS.items():
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.shard), str(int(cold)),
                              str(int(int8)), str(args.queries), str(args.ef)],
                             capture_output=True, text=True, check=True)
        results["variants"][name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(name, results["variants"][name], file=sys.stderr)
    results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["command"] = "nice -n 10 .venv/bin/python bench/bench_ann_rss.py " + " ".join(
        sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(results, indent=2))
    lines = [f"# Memory of a built shard in a process of its own, {results['when']}", "",
             f"Shard `{args.shard.name}` (files, MiB: {results.get('shard_files_mib')}); "
             f"{args.queries} stored vectors perturbed as queries, each asked with and without "
             f"the readers filter of bench_scale's caller, limit 50, ef {args.ef}. Load average "
             f"{results['load_at_start']} at start, {results['load_at_end']} at the end (a "
             "shared 2-core machine). RSS includes Python and numpy (the first column).", "",
             "The dense storage of the segments, as built: "
             f"{results['segment_storage']}. A placement given at load (`Memory.Cold`) is "
             "stored in the shard's config, but a built segment keeps the storage it was "
             "written with until a compaction rewrites it: the third row reads the same "
             "segments as the first.", "",
             f"Command: `{results['command']}`", "",
             "| Variant | Python alone MiB | load s | RSS after load MiB | RSS after searches "
             "MiB | query p50 / p95 ms |", "|---|---|---|---|---|---|"]
    for name, v in results["variants"].items():
        lines.append(f"| {name} | {v['python_mib']} | {v['load_s']} | {v['after_load_mib']} | "
                     f"{v['after_search_mib']} | {v['p50_ms']} / {v['p95_ms']} |")
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
