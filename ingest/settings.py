"""The ingest layer's settings: how documents are cut, the room kept free on the data folder's
disk, where HTTP callers may ingest from, and the schedule `citewise serve` runs (see
``core/settings.py`` for how parts are read and composed)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from citewise.errors import ConfigError
from citewise.settings import ConfigTable, SettingsPart


class IngestSettings(SettingsPart):
    min_free_mb: int = Field(
        default=100, ge=0, description="Megabytes an ingest run (and a reindex, a repair, a "
        "restore) keeps free on the data folder's disk: below that it stops with an error "
        "(the embedded index crashes when its disk fills); 0 = no check.")
    # The schedule `citewise serve` runs ingests on ([schedule] in the config file)
    schedule_ingest: str | None = Field(
        default=None, description="Cron expression for every source's ingest (e.g. "
        "'30 2 * * *'); a source's own `schedule` wins; unset = no schedule.")
    schedule_timezone: str = Field(default="UTC", description="Time zone of the schedule.")
    schedule_catch_up: bool = Field(
        default=True, description="At start, run sources whose due time passed while the "
        "server was down.")
    serve_runs_ingest: bool = Field(
        default=True, description="Whether `citewise serve` runs ingest jobs and the schedule "
        "itself. With CITEWISE_DATABASE_URL, false for API replicas beside a `citewise worker`, "
        "which runs them (the replicas still accept jobs); without a database the server runs "
        "what it accepts, so false is refused.")
    ingest_yield: float = Field(
        default=3.0, ge=0, description="While `citewise serve` is answering requests, an ingest "
        "run in it pauses as it goes for this many times the CPU time it spent, so searches "
        "keep their speed (it takes at most 1/(1+N) of a core while requests are in flight, all "
        "it needs otherwise); 0 = never pause.")
    chunk_max_tokens: int = Field(
        default=200, description="Word-pieces per chunk (the model truncates at 256)."
    )
    parse_processes: int | None = Field(
        default=None, ge=0, description="Worker processes an ingest run parses and chunks "
        "documents in (and redacts them, and makes their BM25 vectors) beside its own process, "
        "which is one core; 0 = none, all in the run's process. Unset = as many as the cores, "
        "at most 4 (none on one core), when the embedding model is remote "
        "(CITEWISE_EMBEDDING_URL), and 0 with the local model, which already computes on every "
        "core. A run starts them only once it has more than 16 documents to parse.")
    ingest_allowed_paths: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Folders under which POST /v1/ingest/jobs may ingest a path "
        "(comma-separated); unset = no path ingest over HTTP.",
    )

    @field_validator("ingest_allowed_paths", mode="before")
    @classmethod
    def _split_paths(cls, v: Any) -> list[Path]:
        if isinstance(v, str):
            v = [p for p in v.split(",") if p.strip()]
        return [Path(p).expanduser().resolve() for p in v or []]

    @property
    def min_free_bytes(self) -> int:
        return self.min_free_mb * 2**20


def _read_schedule(table: Any, path: Path) -> dict[str, Any]:
    """``[schedule]`` spells ``schedule_ingest`` as ``ingest`` (and so on): the same settings,
    which the environment beats as it beats ``[settings]``."""
    schedule = {} if table is None else table
    if not isinstance(schedule, dict) or set(schedule) - {"ingest", "timezone", "catch_up"}:
        raise ConfigError(f"config file {path}: [schedule] holds ingest, timezone and "
                          "catch_up", hint='e.g. [schedule] ingest = "30 2 * * *"')
    return {f"schedule_{k}": v for k, v in schedule.items()}


SCHEDULE_TABLE = ConfigTable("schedule", "[schedule]", _read_schedule)
