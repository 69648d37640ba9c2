"""The packaged all-MiniLM-L6-v2 exported to ONNX and quantized to int8, against the torch model
citewise runs today: is any variant fast enough, and close enough, to replace it?

Every variant is built here from the packaged weights (no download): the BERT encoder with
mean pooling and L2 normalisation inside the graph, exported with ``torch.onnx`` (opset 17),
then

* ``onnx-fp32``: the export as is; ``onnx-fp32-fused``: after onnxruntime's transformer
  optimizer (attention, GELU and layer-norm fusions), what the int8 variants start from;
* ``dyn-int8*``: ``quantize_dynamic`` (weights int8, activations quantized per batch at run
  time), per tensor, per channel, per channel with ``reduce_range`` (7-bit weights, for CPUs
  without VNNI), and per channel with the feed-forward down-projections kept fp32 (the layers
  whose activations carry BERT's outliers);
* ``static-qdq*``: ``quantize_static`` in QDQ format, int8 weights per channel and int8
  activations whose ranges were calibrated on real chunks (distinct from the measured ones),
  all MatMuls, or with the feed-forward down-projections kept fp32.

Measured over the same texts for each: real chunks of the five shared corpora, made by the
ingest's own chunkers and embedding texts (title > heading, then text), a window of 2,048
sorted by length and embedded in batches of 32, as ``ingest/pipeline.py`` does; the variants
take turns block by block (256 chunks), so that the load of a shared machine falls on all
alike. Threads: the torch default (every core), the same count given to onnxruntime. Drift:
the cosine between each variant's vector and torch's for every chunk and for every question of
the golden sets (demo, shared corpora, blind, paraphrases). A variant is worth a quality
evaluation (SciFact and the golden sets, ``make eval``) only at >= 1.3x torch's chunks/s and a
mean cosine >= 0.99; the verdict says which did.

    .venv/bin/pip install -c constraints.txt onnx==1.23.2 onnxruntime==1.31.1 onnxscript==0.7.2
    nice -n 10 .venv/bin/python bench/bench_onnx.py [--chunks 2048] [--block 256] --work DIR
    # -> bench/results/onnx.{json,md}
    # then, for a variant that passed both gates, its quality beside torch's (hours on 2 cores):
    nice -n 10 .venv/bin/python bench/bench_onnx.py --work DIR --quality dyn-int8-pc \
        [--scifact-docs 1000] [--skip-shared]

The quality runs are ``make eval``'s: ``citewise eval`` over a SciFact subset (train split,
``bench_encoders.scifact_subset``), the demo golden set, and with the shared corpora the
shared-corpora and blind golden sets, each in a fresh data folder, once with the torch model
and once with the variant, served on loopback by the OpenAI-compatible fake
(``tests/fakes/openai_provider.py``) and reached through ``CITEWISE_EMBEDDING_URL`` as any
remote model is. The variant is kept only if none of them loses more than 0.005 (nDCG@10 for
SciFact, hit@1 for the golden sets).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT.parent / "shared" / "corpora"
RESULTS = ROOT / "bench" / "results"
QUESTION_FILES = [ROOT / "demo" / "golden-set.jsonl",
                  ROOT / "bench" / "golden" / "shared-corpora.jsonl",
                  ROOT / "bench" / "golden" / "blind.jsonl",
                  ROOT / "bench" / "golden" / "paraphrases.jsonl"]
BATCH = 32  # the ingest's embedding batch (CITEWISE_EMBEDDING_BATCH_SIZE's default)
MAX_TOKENS = 256  # the model's max_seq_length, as sentence-transformers truncates
SPEEDUP_GATE, COSINE_GATE = 1.3, 0.99

Encode = Callable[[list[str]], np.ndarray]


# Texts ----------------------------------------------------------------------------------------
def corpus_chunks() -> list[str]:
    """Every chunk text of the shared corpora as the ingest makes it (redaction, the chunkers
    of the packaged tokenizer at the default 200 word-pieces, ``embedding_text``)."""
    from citewise.connectors.folder import FolderConfig, FolderConnector
    from citewise.index.catalog import document_id
    from citewise.index.dense import DenseEncoder, embedding_text
    from citewise.ingest.chunking import Chunkers
    from citewise.ingest.parse import without_nul
    from citewise.ingest.redact import redact_document

    chunkers = Chunkers(DenseEncoder().count_tokens, 200)
    texts: list[str] = []
    for folder in sorted(p for p in CORPORA.iterdir() if p.is_dir()):
        connector = FolderConnector(FolderConfig(folder, include=["*.md"], readers=["public"]))
        for batch in connector.load():
            for doc in batch:
                if doc.error:
                    continue
                doc = redact_document(without_nul(doc))
                for c in chunkers.for_media_type(doc.media_type).chunk(
                        document_id(folder.name, doc.external_id), doc):
                    texts.append(embedding_text(doc.title, c.heading, c.text))
    return texts


def questions() -> list[str]:
    seen: dict[str, None] = {}
    for path in QUESTION_FILES:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                for key in ("question", "paraphrase"):
                    if row.get(key):
                        seen.setdefault(row[key], None)
    return list(seen)


# Building the variants ------------------------------------------------------------------------
def export(model_dir: Path, out: Path) -> None:
    """The encoder, mean pooling over real tokens and L2 normalisation, as one ONNX graph."""
    import torch
    from sentence_transformers import SentenceTransformer

    bert = SentenceTransformer(str(model_dir), device="cpu")[0].auto_model.eval()

    class Sentence(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    ids = torch.ones((2, 16), dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(Sentence().eval(), (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                          str(out), input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["sentence_embedding"], opset_version=17, dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes,
                                        "token_type_ids": axes, "sentence_embedding": {0: "batch"}})


def ffn_down_projections(path: Path) -> list[str]:
    """The MatMuls of each layer's feed-forward output (``output/dense``, not the attention's):
    the inputs of these carry BERT's large activation outliers, the usual int8 casualty."""
    import onnx

    graph = onnx.load(str(path)).graph
    return [n.name for n in graph.node if n.op_type == "MatMul" and "/output/dense/" in n.name
            and "/attention/" not in n.name]


class Calibration:
    """``quantize_static``'s calibration reader: batches of real chunks (not the measured ones)."""

    def __init__(self, tokenize: Callable[[list[str]], dict[str, np.ndarray]],
                 texts: list[str]) -> None:
        self._batches = iter([tokenize(texts[i:i + BATCH]) for i in range(0, len(texts), BATCH)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)

    def rewind(self) -> None:  # not needed for one pass
        pass


def build_variants(work: Path, tokenize: Callable[[list[str]], dict[str, np.ndarray]],
                   calibration: list[str]) -> dict[str, Path]:
    import onnx
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from onnxruntime.transformers.optimizer import optimize_model

    from citewise.index.dense import packaged_model_path

    plain = work / "fp32.onnx"
    export(packaged_model_path(), plain)
    fused = work / "fp32-fused.onnx"
    optimize_model(str(plain), model_type="bert", num_heads=12, hidden_size=384,
                   opt_level=1).save_model_to_file(str(fused))
    variants = {"onnx-fp32": plain, "onnx-fp32-fused": fused}

    def dynamic(name: str, *, per_channel: bool, reduce_range: bool = False,
                exclude: list[str] | None = None) -> None:
        out = work / f"{name}.onnx"
        quantize_dynamic(str(fused), str(out), weight_type=QuantType.QInt8,
                         per_channel=per_channel, reduce_range=reduce_range,
                         nodes_to_exclude=exclude or [],
                         # The fused ops are onnxruntime's own: ONNX shape inference cannot
                         # type their outputs, which are float.
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        variants[name] = out

    dynamic("dyn-int8", per_channel=False)
    dynamic("dyn-int8-pc", per_channel=True)
    dynamic("dyn-int8-pc-rr", per_channel=True, reduce_range=True)
    dynamic("dyn-int8-pc-ffn-fp32", per_channel=True, exclude=ffn_down_projections(fused))

    # Static quantization works on plain MatMuls (the fused Attention op has no QDQ form here),
    # after the shape inference and folding onnxruntime recommends before it (its symbolic
    # shape inference gives up on the dynamic sequence axis; ONNX's own suffices).
    prepared = work / "fp32-prep.onnx"
    quant_pre_process(str(plain), str(prepared), skip_symbolic_shape=True)

    def static(name: str, exclude: list[str] | None = None) -> None:
        out = work / f"{name}.onnx"
        quantize_static(str(prepared), str(out), Calibration(tokenize, calibration),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        op_types_to_quantize=["MatMul"], nodes_to_exclude=exclude or [],
                        calibrate_method=CalibrationMethod.MinMax)
        variants[name] = out

    static("static-qdq-pc")
    static("static-qdq-pc-ffn-fp32", exclude=ffn_down_projections(prepared))
    return variants


# Running them ---------------------------------------------------------------------------------
def onnx_encoder(path: Path, threads: int,
                 tokenize: Callable[[list[str]], dict[str, np.ndarray]]) -> Encode:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def encode(texts: list[str]) -> np.ndarray:
        out = np.concatenate([session.run(None, tokenize(texts[i:i + BATCH]))[0]
                              for i in range(0, len(texts), BATCH)])
        return out.astype(np.float32)

    return encode


QUALITY_LOSS = 0.005


def serve(path: Path, threads: int,
          tokenize: Callable[[list[str]], dict[str, np.ndarray]]) -> tuple[object, str]:
    """The variant behind an OpenAI-compatible embeddings endpoint on loopback (a thread of
    this process: onnxruntime computes outside the GIL)."""
    sys.path.insert(0, str(ROOT))
    from tests.fakes.openai_provider import OpenAIProvider

    fake = OpenAIProvider(model="minilm-onnx")
    fake.embedder = onnx_encoder(path, threads, tokenize)
    fake.start()
    return fake, fake.base_url


def evaluate(name: str, url: str | None, work: Path, scifact: Path | None,
             shared: bool) -> dict:
    """``make eval``'s runs for one encoder, each in a data folder of its own."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_encoders import run

    env = {k: v for k, v in os.environ.items() if not k.startswith("CITEWISE_")}
    if url:
        env.update(CITEWISE_EMBEDDING_URL=url, CITEWISE_EMBEDDING_MODEL=name,
                   CITEWISE_EMBEDDING_DIM="384", CITEWISE_EMBEDDING_CONCURRENCY="1",
                   CITEWISE_EMBEDDING_TIMEOUT="600")
    log, out = work / f"{name}.log", {}
    started = time.perf_counter()

    def scores(file: Path) -> dict:
        data = json.loads(file.read_text())
        if "beir" in data:
            return {c["config"]: c["ndcg@10"] for c in data["beir"]["configs"]}
        return {c["config"]: c["hit@1"] for c in data["golden_set"]["search"]}

    if scifact is not None:
        env["CITEWISE_DATA_DIR"] = str(work / name / "scifact")
        run(["eval", str(scifact), "--split", "train", "--configs", "dense,default",
             "--out", str(work / f"{name}-scifact.json")], env, log)
        out["scifact_ndcg@10"] = scores(work / f"{name}-scifact.json")
    env["CITEWISE_DATA_DIR"] = str(work / name / "demo")
    run(["ingest", "--all"], env, log)
    run(["eval", "--qa", "demo/golden-set.jsonl", "--configs", "default",
         "--out", str(work / f"{name}-demo.json")], env, log)
    out["demo_hit@1"] = scores(work / f"{name}-demo.json")
    if shared:
        env["CITEWISE_DATA_DIR"] = str(work / name / "corpora")
        run(["--config", "bench/corpora.toml", "ingest", "--all"], env, log)
        for key, golden in (("shared_hit@1", "shared-corpora"), ("blind_hit@1", "blind")):
            run(["--config", "bench/corpora.toml", "eval", "--qa", f"bench/golden/{golden}.jsonl",
                 "--configs", "default", "--out", str(work / f"{name}-{golden}.json")], env, log)
            out[key] = scores(work / f"{name}-{golden}.json")
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def quality(args: argparse.Namespace, threads: int,
            tokenize: Callable[[list[str]], dict[str, np.ndarray]]) -> None:
    """Quality of one variant beside torch's, added to the results of the speed run."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_encoders import SCIFACT, scifact_subset

    results = args.out / "onnx.json"
    result = json.loads(results.read_text())
    model = args.work / f"{args.quality}.onnx"
    if not model.exists():
        sys.exit(f"{model} is absent: run the speed measurement with --work {args.work} first")
    scifact = None
    if (SCIFACT / "corpus.jsonl").exists() and args.scifact_docs:
        scifact = scifact_subset(args.work / "scifact-subset", args.scifact_docs)
    shared = not args.skip_shared and CORPORA.is_dir()
    load_start = load_avg()
    server, url = serve(model, threads, tokenize)
    try:
        runs = {"torch": evaluate("torch", None, args.work, scifact, shared),
                args.quality: evaluate(args.quality, url, args.work, scifact, shared)}
    finally:
        server.stop()  # type: ignore[attr-defined]
    losses = {}
    for key, base in runs["torch"].items():
        if key != "seconds":
            losses[key] = round(base["default"] - runs[args.quality][key]["default"], 4)
    result["quality"] = {
        "variant": args.quality, "runs": runs, "losses": losses,
        "scifact_docs": args.scifact_docs if scifact else None, "shared": shared,
        "kept": all(v <= QUALITY_LOSS for v in losses.values()) and shared and bool(scifact),
        "load_start": load_start, "load_end": load_avg(),
        "command": "nice -n 10 .venv/bin/python bench/bench_onnx.py " + " ".join(sys.argv[1:]),
    }
    results.write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "onnx.md").write_text(markdown(result))
    print(markdown(result))


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=2048, help="chunks measured (one window)")
    parser.add_argument("--block", type=int, default=256, help="chunks per turn of a variant")
    parser.add_argument("--calibration", type=int, default=256, help="calibration chunks")
    parser.add_argument("--work", type=Path, help="keep the models here (default: temp)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--quality", metavar="VARIANT",
                        help="evaluate this variant (built in --work) beside torch, and add it "
                             "to the results")
    parser.add_argument("--scifact-docs", type=int, default=1000, metavar="N",
                        help="SciFact subset for --quality (0: leave SciFact out)")
    parser.add_argument("--machine-note", metavar="TEXT",
                        help="what else ran on the machine meanwhile, written beside the load "
                             "average")
    parser.add_argument("--skip-shared", action="store_true",
                        help="--quality without the shared-corpora and blind sets")
    args = parser.parse_args()
    if not CORPORA.is_dir():
        print(f"skipping: {CORPORA} is absent (the shared corpora are the measured texts)",
              file=sys.stderr)
        return
    import torch
    from tokenizers import Tokenizer

    from citewise.index.dense import DenseEncoder, packaged_model_path

    started, load_start = time.perf_counter(), load_avg()
    threads = torch.get_num_threads()
    tokenizer = Tokenizer.from_file(str(packaged_model_path() / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_TOKENS)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def tokenize(texts: list[str]) -> dict[str, np.ndarray]:
        enc = tokenizer.encode_batch(texts)
        return {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64)}

    if args.quality:
        if not args.work:
            sys.exit("--quality needs --work: the folder the speed run built the variants in")
        quality(args, threads, tokenize)
        return

    print("chunking the shared corpora...", file=sys.stderr)
    pool = corpus_chunks()
    rng = random.Random(35)
    picked = rng.sample(range(len(pool)), args.chunks + args.calibration)
    # One embedding window, sorted by length as the pipeline sorts it (less padding per batch).
    measured = sorted((pool[i] for i in picked[:args.chunks]), key=len)
    calibration = [pool[i] for i in picked[args.chunks:]]
    asked = questions()
    pieces = [len(tokenizer.encode(t).ids) for t in measured]

    work = args.work or Path(tempfile.mkdtemp(prefix="citewise-onnx-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"building the variants in {work}...", file=sys.stderr)
    # onnxruntime's quantization tools leave temporary models in the working directory.
    os.chdir(work)
    build_started = time.perf_counter()
    paths = build_variants(work, tokenize, calibration)
    build_seconds = time.perf_counter() - build_started

    dense = DenseEncoder()  # the torch model exactly as citewise runs it (batch 32, normalised)
    encoders: dict[str, Encode] = {"torch": lambda texts: dense.model.encode(
        texts, batch_size=BATCH, normalize_embeddings=True, show_progress_bar=False)}
    for name, path in paths.items():
        encoders[name] = onnx_encoder(path, threads, tokenize)
    for encode in encoders.values():  # warm up: first-call allocations are not throughput
        encode(measured[:BATCH])

    seconds = dict.fromkeys(encoders, 0.0)
    vectors: dict[str, list[np.ndarray]] = {name: [] for name in encoders}
    names = list(encoders)
    blocks = [measured[i:i + args.block] for i in range(0, len(measured), args.block)]
    for k, block in enumerate(blocks):
        order = names[k % len(names):] + names[:k % len(names)]  # each goes first in turn
        for name in order:
            t = time.perf_counter()
            vectors[name].append(np.asarray(encoders[name](block), dtype=np.float32))
            seconds[name] += time.perf_counter() - t
        print(f"  block {k + 1}/{len(blocks)} load {load_avg()}", file=sys.stderr)

    # Questions: drift over all of them (batched), and one question's latency (p50 of 50).
    question_vectors = {name: encode(asked) for name, encode in encoders.items()}
    single: dict[str, list[float]] = {name: [] for name in encoders}
    for q in asked[:50]:
        for name, encode in encoders.items():
            t = time.perf_counter()
            encode([q])
            single[name].append((time.perf_counter() - t) * 1000)

    base = np.concatenate(vectors["torch"])
    rows = []
    for name in encoders:
        mine = np.concatenate(vectors[name])
        cos = np.sum(mine * base, axis=1)
        qcos = np.sum(question_vectors[name] * question_vectors["torch"], axis=1)
        rate = len(measured) / seconds[name]
        rows.append({
            "variant": name, "chunks_per_s": round(rate, 2),
            "speedup": round(rate / (len(measured) / seconds["torch"]), 2),
            "question_p50_ms": round(statistics.median(single[name]), 1),
            "size_mb": round(paths[name].stat().st_size / 1e6, 1) if name in paths else None,
            "chunk_cosine": {"mean": round(float(cos.mean()), 4),
                             "p5": round(float(np.percentile(cos, 5)), 4),
                             "min": round(float(cos.min()), 4)},
            "question_cosine": {"mean": round(float(qcos.mean()), 4),
                                "p5": round(float(np.percentile(qcos, 5)), 4),
                                "min": round(float(qcos.min()), 4)},
        })
    for row in rows:
        row["passes_gates"] = (row["variant"] != "torch" and row["speedup"] >= SPEEDUP_GATE
                               and row["chunk_cosine"]["mean"] >= COSINE_GATE
                               and row["question_cosine"]["mean"] >= COSINE_GATE)
    passed = [r["variant"] for r in rows if r["passes_gates"]]
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "command": "nice -n 10 .venv/bin/python bench/bench_onnx.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "threads": threads,
                    "load_start": load_start, "load_end": load_avg(),
                    "shared": args.machine_note},
        "versions": {p: version(p) for p in ("torch", "sentence-transformers", "onnx",
                                              "onnxruntime", "onnxscript")},
        "texts": {"chunks": len(measured), "corpus_chunks": len(pool),
                  "word_pieces_mean": round(statistics.fmean(pieces), 1),
                  "word_pieces_p95": int(np.percentile(pieces, 95)),
                  "truncated_share": round(sum(p >= MAX_TOKENS for p in pieces) / len(pieces), 3),
                  "questions": len(asked), "calibration_chunks": len(calibration),
                  "block": args.block, "batch": BATCH},
        "build_seconds": round(build_seconds, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "variants": rows,
        "gates": {"speedup": SPEEDUP_GATE, "mean_cosine": COSINE_GATE},
        "passed_gates": passed,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "onnx.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "onnx.md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    m, t = r["machine"], r["texts"]
    lines = [
        "# The packaged all-MiniLM-L6-v2 in ONNX, fp32 and int8, against torch",
        "",
        f"{r['when']}, commit `{r['commit']}`, {m['cpus']} CPUs ({m['threads']} threads for "
        f"torch and onnxruntime alike), {m['platform']}, Python {m['python']}; load average "
        f"{m['load_start']} at start, {m['load_end']} at the end"
        + (f" ({m['shared']}: the figures are noisy, the ratios less so, since the variants "
           "took turns)" if m.get("shared") else "")
        + f"; {r['seconds']} s in all "
        f"(`{r['command']}`).",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in r["versions"].items()) + ".",
        "",
        f"Texts: {t['chunks']} chunks drawn at random (seed 35) from the {t['corpus_chunks']} "
        f"chunks the ingest's chunkers make of the five shared corpora, embedding texts as "
        f"indexed ({t['word_pieces_mean']} word-pieces on average, p95 {t['word_pieces_p95']}, "
        f"{t['truncated_share']:.1%} truncated at 256), sorted by length and embedded in "
        f"batches of {t['batch']}, the variants taking turns every {t['block']} chunks; "
        f"{t['questions']} questions of the golden sets; static quantization calibrated on "
        f"{t['calibration_chunks']} other chunks.",
        "",
        "| variant | chunks/s | × torch | one question p50 ms | MB | chunk cosine mean | p5 | "
        "min | question cosine mean | p5 | min |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in r["variants"]:
        c, q = v["chunk_cosine"], v["question_cosine"]
        lines.append(f"| {v['variant']} | {v['chunks_per_s']} | {v['speedup']} | "
                     f"{v['question_p50_ms']} | {v['size_mb'] or ''} | {c['mean']} | {c['p5']} | "
                     f"{c['min']} | {q['mean']} | {q['p5']} | {q['min']} |")
    gates = r["gates"]
    lines += ["", f"Gates for a quality evaluation: ≥ {gates['speedup']}× torch's chunks/s and a "
                  f"mean cosine ≥ {gates['mean_cosine']} (chunks and questions)."]
    if r["passed_gates"]:
        lines.append(f"Passed: {', '.join(r['passed_gates'])}.")
        q = r.get("quality")
        if q is None:
            lines.append("**Quality not evaluated yet: no variant is adopted.**")
        else:
            scifact = (f"SciFact: train split over a subset of {q['scifact_docs']} documents "
                       "(not comparable with published figures)" if q["scifact_docs"]
                       else "SciFact not run")
            lines += ["", f"## Quality: {q['variant']} beside torch", "",
                      f"`{q['command']}`; load average {q['load_start']} at start, "
                      f"{q['load_end']} at the end. {scifact}; "
                      f"{'' if q['shared'] else 'shared-corpora and blind sets not run; '}"
                      "golden sets: hit@1 of citewise's default search.", "",
                      "| measure | torch | " + q["variant"] + " | loss |", "|---|---:|---:|---:|"]
            for key, loss in q["losses"].items():
                lines.append(f"| {key} (default) | {q['runs']['torch'][key]['default']:.4f} | "
                             f"{q['runs'][q['variant']][key]['default']:.4f} | {loss:+.4f} |")
            over = [k for k, v in q["losses"].items() if v > QUALITY_LOSS]
            if q["kept"]:
                verdict = f"kept: every loss within {QUALITY_LOSS}"
            elif over:
                verb = "loses" if len(over) == 1 else "lose"
                verdict = f"not kept: {', '.join(over)} {verb} more than {QUALITY_LOSS}"
            else:
                verdict = ("not adopted yet: the sets run lose at most "
                           f"{QUALITY_LOSS}, but not every set was run")
            lines += ["", f"**Verdict: {q['variant']} {verdict}.**"]
    else:
        lines.append("**Verdict: no variant passed both gates, so none was evaluated on SciFact "
                     "and the golden sets, and citewise keeps the torch model.**")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
