"""The semantic answer cache: where to set its threshold, what a hit saves, how often it hits.

Over the demo knowledge base (ingested into a scratch folder, as `make run` does):

* calibration: for pairs of questions (`bench/golden/paraphrases.jsonl`) that want the same
  answer (a rewording) or a different one (another database, another alert, write instead of
  read), the cosine of their embeddings; per threshold, the share of same-answer pairs that
  would hit and the number of different-answer pairs that would wrongly hit;
* replay: each golden-set question asked, then again, then its paraphrases, through the
  answer service with the cache as configured: the hit rate and the latency of hits and misses.

    .venv/bin/python bench/bench_cache.py      # -> bench/results/cache.{json,md}
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from citewise.api.composition import build_services  # noqa: E402
from citewise.api.settings import Settings  # noqa: E402
from citewise.ingest.jobs import run_source  # noqa: E402
from citewise.types import Identity  # noqa: E402

THRESHOLDS = (0.85, 0.88, 0.90, 0.92, 0.94, 0.95, 0.96, 0.98)


def ms(samples: list[float]) -> dict:
    samples = sorted(samples)
    return {"p50_ms": round(statistics.median(samples), 2),
            "p95_ms": round(samples[max(0, int(len(samples) * 0.95) - 1)], 2),
            "n": len(samples)}


def main() -> None:
    pairs = [json.loads(line) for line in
             (ROOT / "bench/golden/paraphrases.jsonl").read_text().splitlines() if line]
    golden = [json.loads(line) for line in
              (ROOT / "demo/golden-set.jsonl").read_text().splitlines() if line]
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load(ROOT / "citewise.toml", data_dir=Path(tmp) / "data")
        services = build_services(settings)
        for source in settings.sources:
            run_source(services.pipeline, source, trigger="bench")
        vec = lambda q: np.asarray(services.search.query_vector(q), dtype=np.float32)  # noqa
        sims = [(p, float(vec(p["question"]) @ vec(p["paraphrase"]))) for p in pairs]
        same = [s for p, s in sims if p["same"]]
        different = [s for p, s in sims if not p["same"]]
        calibration = [{"threshold": t,
                        "same_answer_hit_rate": round(sum(s >= t for s in same) / len(same), 3),
                        "false_hits": sum(s >= t for s in different),
                        "different_pairs": len(different)} for t in THRESHOLDS]
        threshold = settings.retrieval.answer_cache_threshold
        answers = services.answers
        answers.cache.clear()
        hit_ms, miss_ms, asked, hits = [], [], 0, 0
        questions = [g["question"] for g in golden]
        replay = questions + questions + [p["paraphrase"] for p in pairs if p["same"]]
        for q in replay:
            started = time.perf_counter()
            a = answers.answer(q, Identity())
            elapsed = (time.perf_counter() - started) * 1000
            asked += 1
            if a.cached:
                hits += 1
                hit_ms.append(elapsed)
            else:
                miss_ms.append(elapsed)
        services.close()
    result = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()} cores",
        "threshold": threshold, "calibration": calibration,
        "similarities": [{"question": p["question"], "paraphrase": p["paraphrase"],
                          "same": p["same"], "cosine": round(s, 4)} for p, s in sims],
        "replay": {"asked": asked, "hits": hits, "hit_rate": round(hits / asked, 3),
                   "hit": ms(hit_ms), "miss": ms(miss_ms)},
    }
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cache.json").write_text(json.dumps(result, indent=2) + "\n")
    r = result["replay"]
    md = [
        "# Semantic answer cache",
        "",
        f"{result['when']}, {result['machine']}, the demo knowledge base "
        "(`bench/bench_cache.py`).",
        "",
        f"Calibration on {len(same)} same-answer and {len(different)} different-answer "
        "question pairs (`bench/golden/paraphrases.jsonl`):",
        "",
        "| threshold | same-answer pairs that hit | different-answer pairs that would hit |",
        "|---:|---:|---:|",
        *[f"| {c['threshold']} | {c['same_answer_hit_rate']:.3f} | {c['false_hits']} of "
          f"{c['different_pairs']} |" for c in calibration],
        "",
        f"Replay at the configured threshold {threshold}: the {len(questions)} golden-set "
        f"questions asked twice, then {len(same)} paraphrases: {r['hits']} hits of "
        f"{r['asked']} ({r['hit_rate']:.3f}). Answer latency: hit p50 {r['hit']['p50_ms']} ms "
        f"(p95 {r['hit']['p95_ms']}), miss p50 {r['miss']['p50_ms']} ms "
        f"(p95 {r['miss']['p95_ms']}).",
        "",
    ]
    (out / "cache.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
