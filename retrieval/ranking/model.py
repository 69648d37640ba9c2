"""The learned ranking model as a file: a LightGBM lambdarank booster with what it needs to be
read right and trusted.

One JSON document:

```
{"format": "citewise-rank-model", "format_version": 1,
 "features": ["fused_score", ...],          # the row order it was trained on (features.py)
 "candidates": 50,                           # how many fused chunks it re-scores
 "prior": 5.0,                               # the fused score's weight in the final score
 "trained": {...},                           # when, on what (files, questions, rows), the
                                             # parameters, the cross-validation figures
 "booster": "<LightGBM's model text>"}
```

A file of another format version, or trained on another feature list, is refused with what to
do (retrain), never read with rows that mean something else.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citewise.errors import ConfigError
from citewise.private_files import private_file
from citewise.retrieval.ranking.features import FEATURES

FORMAT = "citewise-rank-model"
FORMAT_VERSION = 1
DEFAULT_FILE = "rank-model.json"
RETRAIN = ("retrain it on this version: citewise rank train --qa GOLDEN.jsonl (see "
           "docs/quality.md, 'The learned second stage'), or remove the file to search without it")


@dataclass
class RankModel:
    booster_text: str
    features: tuple[str, ...] = FEATURES
    candidates: int = 50
    trained: dict[str, Any] = field(default_factory=dict)
    # The trees learn corrections to the fused order, not an order from nothing: the boosting
    # starts from ``prior`` x the fused score (LightGBM's init_score), so a score is that plus
    # the trees' sum. A few dozen questions are too few to learn a whole ranking from.
    prior: float = 0.0

    def __post_init__(self) -> None:
        import lightgbm

        self._booster = lightgbm.Booster(model_str=self.booster_text)

    def scores(self, rows: list[list[float]]) -> list[float]:
        """One score per row, higher is better. One thread: a search's 50 rows take a
        fraction of a millisecond, less than handing them to a pool would."""
        if not rows:
            return []
        import numpy as np

        x = np.asarray(rows, dtype=np.float64)
        predicted = self._booster.predict(x, num_threads=1)
        if self.prior:
            predicted = predicted + self.prior * x[:, FEATURES.index("fused_score")]
        return [float(v) for v in predicted]

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {"format": FORMAT, "format_version": FORMAT_VERSION,
                    "features": list(self.features), "candidates": self.candidates,
                    "prior": self.prior,
                    "trained": _plain(self.trained), "booster": self.booster_text}
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)
        private_file(tmp)  # beside the catalog: the data folder's files are the owner's alone
        tmp.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n",
                       encoding="utf-8")
        tmp.replace(path)  # a server starting meanwhile reads the old file or the new, whole

    @classmethod
    def load(cls, path: Path) -> RankModel:
        path = Path(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"the ranking model {path} cannot be read: {e}",
                              hint=RETRAIN) from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ConfigError(f"{path} is not a citewise ranking model", hint=RETRAIN)
        if document.get("format_version") != FORMAT_VERSION:
            raise ConfigError(
                f"the ranking model {path} has format version "
                f"{document.get('format_version')!r}; this citewise reads {FORMAT_VERSION}",
                hint=RETRAIN)
        features = tuple(document.get("features") or ())
        if features != FEATURES:
            missing = [f for f in FEATURES if f not in features]
            extra = [f for f in features if f not in FEATURES]
            raise ConfigError(
                f"the ranking model {path} was trained on other features (missing here: "
                f"{missing or 'none'}; unknown here: {extra or 'none'}; or another order)",
                hint=RETRAIN)
        try:
            return cls(booster_text=str(document["booster"]), features=features,
                       candidates=int(document.get("candidates", 50)),
                       prior=float(document.get("prior") or 0.0),
                       trained=dict(document.get("trained") or {}))
        except Exception as e:  # LightGBM raises its own error for a damaged booster
            raise ConfigError(f"the ranking model {path} is damaged: {e}", hint=RETRAIN) from None


def _plain(value: Any) -> Any:
    """JSON has no NaN: figures that could not be computed are written as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
