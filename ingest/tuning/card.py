"""The model card a tuned model carries: ``tuning.json`` (for programs) and ``README.md`` (for
the operator deciding whether to adopt it): the base model, the pairs by kind, what the
leakage guard dropped, the steps, the time, the memory and the validation before and after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from citewise.ingest.tuning.pairs import MinedPairs
from citewise.ingest.tuning.train import TuneOptions, TuneResult, Validation

CARD_FILE = "tuning.json"


def card(base: Path, mined: MinedPairs, options: TuneOptions, result: TuneResult,
         created_at: str, guard_files: list[str],
         validated_on: dict[str, Any] | None = None) -> dict[str, Any]:
    """``validated_on``: the question files validation ranked, when given (``--validate-qa``)."""
    return {"base_model": str(base), "created_at": created_at,
            "pairs": mined.summary(), "guard_files": guard_files,
            "options": options.__dict__, "result": result.to_dict(),
            "validated_on": validated_on}


def write_card(folder: Path, data: dict[str, Any]) -> None:
    (folder / CARD_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (folder / "README.md").write_text(readme(folder.name, data), encoding="utf-8")


def _validation(v: dict[str, Any] | None) -> str:
    if not v:
        return "not measured (no validation pairs)"
    return Validation(**v).line()


def _what_validated(on: dict[str, Any] | None) -> str:
    if not on:
        return "each held-out anchor's passage ranked among all held-out passages"
    return (f"{on['questions']} labelled questions of {', '.join(on['files'])}: each "
            f"question's {on['candidates']} search candidates re-ranked by the model")


def _what_it_says(on: dict[str, Any] | None) -> str:
    if not on:
        return "the model fits this corpus's own pairs better"
    return ("how the model re-ranks what search finds for those questions, not how hybrid "
            "search and answers do with an index built with it")


def readme(name: str, data: dict[str, Any]) -> str:
    pairs, result = data["pairs"], data["result"]
    kinds = sorted(set(pairs["train"]) | set(pairs["validation"]))
    rows = "\n".join(f"| {k} | {pairs['found'].get(k, 0)} | {pairs['train'].get(k, 0)} | "
                     f"{pairs['validation'].get(k, 0)} |" for k in kinds)
    leakage = "; ".join(f"{reason}: {n}" for reason, n in pairs["dropped_for_leakage"].items()) \
        or "none"
    return f"""# {name}

A sentence-transformers model fine-tuned by `citewise tune` from `{data['base_model']}` on
pairs mined from this installation's catalog, on {data['created_at']}. The index does not use
it until `citewise reindex` builds one with it (see "Adopting it").

## Pairs

{pairs['documents']} documents. Found = mined before any was dropped; train and validation =
used (validation holds out whole documents).

| kind | found | train | validation |
| --- | --- | --- | --- |
{rows}

- Dropped by the leakage guard ({pairs['guarded_questions']} golden-set questions from
  {', '.join(data['guard_files']) or 'no file'}): {pairs['dropped_for_leakage_total']}
  ({leakage}).
- Dropped as duplicates: {pairs['dropped_duplicate']}; as ambiguous anchors (naming several
  documents): {pairs['dropped_ambiguous']}; over the per-document cap: {pairs['dropped_over_cap']}.

## Training

{result['steps']} steps of batch {data['options']['batch_size']} ({result['pairs_trained']}
pairs, {result['pairs_per_second']} pairs/s) in {result['seconds']} s; stopped by:
{result['stopped']}. Peak memory (RSS) {result['peak_rss_mb']} MB. Loss (mean of 20 steps)
{result['loss_first']} at the start, {result['loss_last']} at the end.

## Validation ({_what_validated(data.get('validated_on'))})

- before: {_validation(result['before'])}
- kept (best): {_validation(result['best'])}

## Adopting it

The validation above says {_what_it_says(data.get('validated_on'))}; whether it answers
questions better is what `citewise eval` says. To adopt it (the live index keeps serving
until the new one is complete):

    CITEWISE_EMBEDDING_MODEL_PATH={{this folder}} citewise reindex

then give `citewise serve` the same setting (`embedding_model_path` under `[settings]`). To go
back, reindex with the setting unset.
"""
