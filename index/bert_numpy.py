"""The forward pass of a BERT sentence-transformer (the packaged all-MiniLM-L6-v2) in numpy.

Why: importing torch, transformers and sentence-transformers takes seconds (about 8 s of a
one-off `citewise ask` on a busy two-core machine, most of it sentence-transformers pulling
scikit-learn and scipy.stats), while the model itself is six small layers that numpy runs in
milliseconds for a question. This module reads the same weights (``model.safetensors``) and the
same tokenizer (``tokenizer.json``) and computes what sentence-transformers computes for a
``Transformer -> Pooling(mean) -> Normalize`` model: embeddings, then per layer self-attention
and the feed-forward block, each with its residual and LayerNorm, then the mean of the token
vectors and L2 normalisation. The vectors agree with sentence-transformers' to float32 rounding
(``tests/index/test_bert_numpy.py`` holds them to it: within 1e-6 of each other, where
torch's own vectors of one text differ by about 2e-7 between a batch and a lone call).

Only models of exactly that shape are taken (``load`` returns None for any other: a tuned
model saved by `citewise tune` has the same shape and is taken; anything else is left to
sentence-transformers). Each text runs alone (no padding, so no attention mask), which is what
a question or a handful of answer sentences need; bulk document embedding stays with torch.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np

# What this encoder implements; a model folder that says anything else is not taken.
_MODULES = ["sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
            "sentence_transformers.models.Normalize"]


class NumpyBert:
    def __init__(self, path: Path, weights: dict[str, np.ndarray], config: dict[str, Any],
                 max_tokens: int) -> None:
        from tokenizers import Tokenizer

        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_tokens = max_tokens
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        # Linear weights stored transposed and contiguous: x @ W.T on a strided view runs at
        # half the speed.
        self.w = {k.removeprefix(prefix): np.ascontiguousarray(
            v.T if k.endswith(".weight") and v.ndim == 2 and "embeddings" not in k else v,
            dtype=np.float32) for k, v in weights.items()}
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=max_tokens)
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        from threadpoolctl import ThreadpoolController

        # The matrices of one sentence are small: OpenBLAS's second thread only adds
        # hand-offs, and on a busy machine made each product four times slower (measured:
        # 2.9 ms with two threads, 0.7 ms with one, for a 15 x 384 by 384 x 1536 product).
        self._blas = ThreadpoolController()
        self._lock = threading.Lock()  # the limit is the process's: set and restored by one
        self.encoded = 0  # texts embedded here (which way a text went: the tests read it)

    def encode(self, texts: list[str]) -> np.ndarray:
        """One L2-normalised row per text."""
        out = np.zeros((len(texts), self.w["embeddings.word_embeddings.weight"].shape[1]),
                       dtype=np.float32)
        encodings = self.tokenizer.encode_batch(texts)
        with self._lock, self._blas.limit(limits=1, user_api="blas"):
            for i, encoding in enumerate(encodings):
                out[i] = self._sentence(np.asarray(encoding.ids, dtype=np.int64))
            self.encoded += len(texts)
        return out

    def _sentence(self, ids: np.ndarray) -> np.ndarray:
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][: len(ids)]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        for n in range(self.layers):
            x = self._layer(x, f"encoder.layer.{n}.")
        pooled = x.mean(axis=0)
        norm = float(np.linalg.norm(pooled))
        result: np.ndarray = pooled / max(norm, 1e-12)
        return result

    def _layer(self, x: np.ndarray, p: str) -> np.ndarray:
        tokens, hidden = x.shape
        size = hidden // self.heads

        def heads(name: str) -> np.ndarray:
            # (heads, tokens, size), contiguous: numpy multiplies strided stacks of matrices
            # with a slow loop instead of BLAS.
            y = self._linear(x, p + f"attention.self.{name}")
            return np.ascontiguousarray(y.reshape(tokens, self.heads, size).transpose(1, 0, 2))

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = q @ np.ascontiguousarray(k.transpose(0, 2, 1)) / np.float32(math.sqrt(size))
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        context = (weights @ v).transpose(1, 0, 2).reshape(tokens, hidden)
        x = self._norm(self._linear(context, p + "attention.output.dense") + x,
                       p + "attention.output.LayerNorm")
        inner = _gelu(self._linear(x, p + "intermediate.dense"))
        return self._norm(self._linear(inner, p + "output.dense") + x, p + "output.LayerNorm")

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        result: np.ndarray = x @ self.w[name + ".weight"] + self.w[name + ".bias"]
        return result

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        result: np.ndarray = (x - mean) / np.sqrt(var + self.eps) * self.w[name + ".weight"] \
            + self.w[name + ".bias"]
        return result


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x), with scipy's erf (imported here: a fraction of a second,
    against the seconds of torch)."""
    from scipy.special import erf

    result: np.ndarray = (0.5 * x * (1.0 + erf(x / np.float32(math.sqrt(2.0))))) \
        .astype(np.float32)
    return result


def load(path: Path) -> NumpyBert | None:
    """The model at ``path`` as a ``NumpyBert``, or None when it is not a plain BERT
    mean-pooled, normalised sentence-transformer with its weights in ``model.safetensors``."""
    try:
        modules = [m["type"] for m in json.loads((path / "modules.json").read_text())]
        config = json.loads((path / "config.json").read_text())
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
        st_config = json.loads((path / "sentence_bert_config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    mean_only = pooling.get("pooling_mode_mean_tokens") and not any(
        pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens",
                                 "pooling_mode_mean_sqrt_len_tokens",
                                 "pooling_mode_weightedmean_tokens",
                                 "pooling_mode_lasttoken"))
    if (modules != _MODULES or config.get("model_type") != "bert" or not mean_only
            or config.get("hidden_act") != "gelu"
            or config.get("position_embedding_type", "absolute") != "absolute"
            or st_config.get("do_lower_case") or not (path / "model.safetensors").exists()
            or not (path / "tokenizer.json").exists()):
        return None
    from safetensors.numpy import load_file

    return NumpyBert(path, load_file(str(path / "model.safetensors")), config,
                     max_tokens=int(st_config.get("max_seq_length", 256)))
