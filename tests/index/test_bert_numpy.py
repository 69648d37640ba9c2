"""The numpy forward pass of the packaged model (``index/bert_numpy.py``) against
sentence-transformers': the same vectors to float32 rounding, for questions, sentences, and a
text past the model's 256 word-pieces; and what ``DenseEncoder`` embeds with it."""

from __future__ import annotations

import json
import shutil

import numpy as np

from citewise.index import bert_numpy
from citewise.index.dense import DenseEncoder, packaged_model_path

TEXTS = [
    "what do I do when CheckoutAPIHighLatencyP99 fires?",
    "redis failover",
    "Promote the replica with the smallest replication offset lag by running a manual "
    "Sentinel failover. Then restart the checkout pods so they reconnect.",
    "def embed_query(self, text: str) -> list[float]:\n    return self._queries.embed(text)",
    "Ünïcödé, emoji 🚀 and punctuation!?; also CAPITALS and numbers 12345.",
    "disk " * 400,  # truncated at 256 word-pieces, as sentence-transformers truncates
]


def test_numpy_vectors_match_sentence_transformers(dense):
    light = bert_numpy.load(packaged_model_path())
    assert light is not None
    mine = light.encode(TEXTS)
    theirs = dense.model.encode(TEXTS, normalize_embeddings=True, batch_size=32)
    assert mine.shape == theirs.shape == (len(TEXTS), 384)
    assert float(np.abs(mine - theirs).max()) < 1e-6
    assert np.allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-6)
    # The order of similarities (what search ranks by) is the same.
    assert (np.argsort(mine @ mine[0]) == np.argsort(theirs @ theirs[0])).all()


def test_a_model_of_another_shape_is_left_to_sentence_transformers(tmp_path):
    folder = tmp_path / "other"
    shutil.copytree(packaged_model_path(), folder)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.write_text(json.dumps(config))
    assert bert_numpy.load(folder) is None
    assert bert_numpy.load(tmp_path / "missing") is None


def test_questions_use_it_until_torch_has_the_model(tmp_path, dense):
    """A copy of the packaged model in a folder of its own: torch has not loaded it in this
    process, so a question is embedded by numpy, and the vector is torch's to rounding."""
    folder = tmp_path / "minilm-copy"
    shutil.copytree(packaged_model_path(), folder)
    encoder = DenseEncoder(folder)
    question = encoder.embed_query(TEXTS[0])
    from citewise.index.dense import _models

    assert folder not in _models  # torch was not asked
    torch_vector = dense.model.encode([TEXTS[0]], normalize_embeddings=True)[0]
    assert float(np.abs(np.asarray(question) - torch_vector).max()) < 1e-6
    units = encoder.embed_documents(TEXTS[2:4], use_cache=False)  # answer sentences
    assert folder not in _models
    assert float(np.abs(units - dense.model.encode(TEXTS[2:4], normalize_embeddings=True))
                 .max()) < 1e-6
    encoder.warm_up()  # what a server loads behind its port, and documents are embedded with
    assert folder in _models
    # Torch loaded, a lone question still goes the numpy way (dense.LIGHT_UP_TO: torch spends
    # twice the CPU on one text); several answer sentences at once go to torch.
    from citewise.index.dense import _light_models

    light = _light_models[folder]
    assert light is not None
    before = light.encoded
    again = encoder.embed_query(TEXTS[1])
    assert light.encoded == before + 1
    assert float(np.abs(np.asarray(again) - dense.model.encode(
        [TEXTS[1]], normalize_embeddings=True)[0]).max()) < 1e-6
    encoder.embed_documents(["Drain the node first.", "Then cordon it."], use_cache=False)
    assert light.encoded == before + 1
