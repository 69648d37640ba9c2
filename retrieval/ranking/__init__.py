"""The learned second stage of search: a small LightGBM lambdarank model that re-scores the
fused candidates (``stage.py``) from features search already has (``features.py``), kept as a
versioned file (``model.py``). Trained by `citewise rank train` (``api/ranking/``); off when
no model file is present. See docs/quality.md, "The learned second stage"."""
