"""Settings: 12-factor environment variables (``CITEWISE_*``) over an optional TOML config file.

Precedence, highest first: environment, the config file's ``[settings]`` table, defaults. The
config file also declares the sources that ``citewise ingest --all`` (the nightly cron) runs::

    [settings]
    data_dir = "/var/lib/citewise"

    [[sources]]
    name = "runbooks"
    type = "folder"
    path = "/srv/runbooks"
    readers = ["group:engineering"]

How they are built. Each layer declares the settings it reads as a ``SettingsPart`` in its own
package (``index/settings.py``: ``IndexSettings``, ``gateway/settings.py``: ``GatewaySettings``,
...), so core knows nothing of Qdrant, Slack or OIDC. The settings object of a process is one
``CoreSettings`` subclass that holds the parts as fields (``settings.index``,
``settings.gateway``); it is composed where every part may be imported, the API layer
(``citewise.api.settings.Settings``), and the composition root hands each layer its part.

A setting has one name everywhere: the part's field ``qdrant_url`` is ``CITEWISE_QDRANT_URL``
and ``qdrant_url`` under ``[settings]``; the parts nest in the settings object, their variables
do not. So the settings are also made from flat names (``Settings(data_dir=..., qdrant_url=...)``,
what ``load`` does), each routed to the part that declares it.

This module keeps what is everyone's: the loading (``CoreSettings.load``), the data folder and
its layout (``DataFolder``), logging, and the ``[[sources]]`` declarations (``SourceConfig``).
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from citewise.errors import ConfigError, NotFoundError
from citewise.types import normalise_readers

SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
ENV_PREFIX = "CITEWISE_"
# A field's json_schema_extra key naming the config file's table that alone gives it.
_TABLE = "config_table"


class SourceConfig(BaseModel):
    """One source: a name, a connector type and that connector's own settings."""

    model_config = {"extra": "allow", "populate_by_name": True}

    name: str
    type: str
    # When `citewise serve` ingests it: a cron expression, "off", or None for [schedule]'s.
    schedule: str | None = None
    # Who may read the source's documents when a document does not say so itself (front matter,
    # an HTML meta, Confluence restrictions). None: the settings' ``default_readers``; a folder
    # or git source with neither is refused, since "public" must always be said explicitly.
    readers: list[str] | None = Field(
        default=None, validation_alias=AliasChoices("readers", "default_readers")
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        if not SOURCE_NAME.match(v):
            raise ValueError(
                f"source name {v!r} must be lowercase letters, digits, '.', '_' or '-' "
                "(at most 63 characters), e.g. 'runbooks' or 'eng-wiki'"
            )
        return v

    @field_validator("readers")
    @classmethod
    def _valid_readers(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else normalise_readers(v)

    def options(self) -> dict[str, Any]:
        """The connector-specific settings (everything but name, type and readers)."""
        return dict(self.model_extra or {})


def find_source(sources: Iterable[SourceConfig], name: str) -> SourceConfig:
    """The declared source called ``name``, or a ``NotFoundError`` listing the known ones."""
    sources = list(sources)
    for s in sources:
        if s.name == name:
            return s
    known = ", ".join(s.name for s in sources) or "none declared"
    raise NotFoundError(
        f"no source named {name!r} in the config file (known: {known})",
        hint="declare it under [[sources]] in citewise.toml, or pass a folder path",
    )


@dataclass(frozen=True)
class DataFolder:
    """Where each piece of state lives in the data folder (``CITEWISE_DATA_DIR``)."""

    root: Path

    @property
    def catalog_path(self) -> Path:
        return self.root / "catalog.db"

    @property
    def embedding_cache_path(self) -> Path:
        return self.root / "embeddings.db"

    @property
    def qdrant_path(self) -> Path:
        return self.root / "qdrant"

    @property
    def blob_dir(self) -> Path:
        return self.root / "blobs"

    @property
    def vocabulary_path(self) -> Path:
        """The vocabulary mined from the corpus, with its vetoes (``retrieval/vocabulary.py``),
        unless ``CITEWISE_VOCABULARY_FILE`` names another file."""
        return self.root / "vocabulary.toml"

    @property
    def models_dir(self) -> Path:
        """Where `citewise tune` writes the models it tunes, one folder each."""
        return self.root / "models"

    @property
    def run_lock_path(self) -> Path:
        """The ingest run lock (``ingest/runlock.py``): one run at a time, any process."""
        return self.root / "ingest.lock"

    @property
    def server_file(self) -> Path:
        """Written by `citewise serve` so that other processes can find it."""
        return self.root / "server.json"


def comma_separated(value: str | None) -> list[str]:
    """A comma-separated setting as a list, blanks dropped."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]


@dataclass(frozen=True)
class ConfigStamp:
    """The config file as it was read: when, and the digest of the bytes parsed. A long-running
    process (``citewise serve``) compares it with the file now to say that its config is older
    than the file, rather than answering from the old one as if it were all there is."""

    path: Path
    digest: str
    read_at: datetime

    @classmethod
    def of(cls, path: Path, data: bytes) -> ConfigStamp:
        return cls(path, hashlib.sha256(data).hexdigest(), datetime.now(UTC))

    def changed(self) -> bool:
        """Whether the file now holds other bytes (or is gone) than the ones read."""
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest() != self.digest
        except OSError:
            return True


def from_table(spelling: str, default_factory: Callable[[], Any]) -> Any:
    """A field that only the config file gives, in its table ``spelling`` (``"[[groups]]"``):
    no variable reads it and no override replaces it, so the file alone says what it holds."""
    return Field(default_factory=default_factory, exclude=True,
                 json_schema_extra={_TABLE: spelling})


def table_of(field: FieldInfo) -> str | None:
    """The config file's table that alone gives ``field`` (``from_table``); None for a
    setting (a variable and a ``[settings]`` key)."""
    extra = field.json_schema_extra
    spelling = extra.get(_TABLE) if isinstance(extra, dict) else None
    return spelling if isinstance(spelling, str) else None


@dataclass(frozen=True)
class ConfigTable:
    """A top-level table of the config file besides ``[settings]``, and how a part reads it."""

    key: str  # as in the file: "llm"
    spelling: str  # as errors name it: "[[llm.providers]]"
    # The table (None: the file has none) and the file's path -> settings by name: values of
    # ``from_table`` fields (the entries validated), or settings the table spells its own way
    # ([schedule] ingest is schedule_ingest, which the environment beats as it beats
    # [settings]). A table that is not what it should be is a ConfigError naming the file.
    read: Callable[[Any, Path], dict[str, Any]]


class SettingsPart(BaseSettings):
    """One layer's share of the settings. Each field is a setting under the name the operator
    uses (``CITEWISE_<NAME>``, ``<name>`` under ``[settings]``), or a ``from_table`` field.

    Made alone (a test's ``GatewaySettings(llm_timeout=5)``) a part reads its own variables;
    inside the settings, ``CoreSettings`` reads every part's at once."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")
    # [settings] keys holding a path that is taken relative to the config file's folder.
    relative_paths: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)

    def loaded(self) -> None:
        """Called by ``CoreSettings.load`` once the settings are valid: refuse here what no
        field's type can say (a variable that is no longer read)."""


def _read_sources(table: Any, path: Path) -> dict[str, Any]:
    sources = []
    for entry in table or []:
        entry = dict(entry)
        # A local path is relative to the file; a URL (a git remote) is left alone.
        if isinstance(entry.get("path"), str) and "://" not in entry["path"]:
            entry["path"] = str(path.parent / entry["path"])
        sources.append(SourceConfig(**entry))
    names = [s.name for s in sources]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ConfigError(f"source names must be unique; repeated: {sorted(dupes)}")
    return {"sources": sources}


SOURCES_TABLE = ConfigTable("sources", "[[sources]]", _read_sources)


class CoreSettings(SettingsPart):
    """Core's own settings, and the settings as a whole: a subclass adds the layers' parts as
    fields (and nothing else), and lists the config file's tables in ``config_tables``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")
    relative_paths = frozenset({"data_dir"})
    # The config file's tables besides [settings], in the order errors list them.
    config_tables: ClassVar[tuple[ConfigTable, ...]] = (SOURCES_TABLE,)
    # Set by ``load``: the file as read, and the overrides given beside it, so that ``reread``
    # gives the settings the same file, environment and overrides give now.
    _config_stamp: ConfigStamp | None = PrivateAttr(default=None)
    _overrides: dict[str, Any] | None = PrivateAttr(default=None)

    config_file: Path | None = Field(
        default=None, description="TOML file with [settings] and [[sources]] (citewise.toml)."
    )
    data_dir: Path = Field(default=Path("data"), description="Folder that holds all state.")
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL (postgresql://user:password@host:5432/db) for the state "
        "every replica shares: catalog, sources, keys, usage, conversations, cache, jobs; "
        "unset = the SQLite file in the data folder (one machine).")
    database_pool_size: int = Field(
        default=10, ge=1, description="Connections each process keeps open to the database.")
    database_timeout: float = Field(
        default=5.0, gt=0, description="Seconds to wait for a database connection before "
        "answering 503.")
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING or ERROR.")
    log_format: Literal["text", "json"] = Field(default="text", description="text or json.")
    default_readers: Annotated[list[str] | None, NoDecode] = Field(
        default=None,
        description="Readers of documents that name none, for sources that name none either "
        "(comma-separated: group:eng,user:dana); unset = such sources are refused.",
    )
    sources: list[SourceConfig] = from_table("[[sources]]", list)

    @field_validator("default_readers", mode="before")
    @classmethod
    def _split_readers(cls, v: Any) -> list[str] | None:
        if isinstance(v, str):
            v = [r for r in v.split(",") if r.strip()]
        return None if v is None else normalise_readers(v)

    # The parts ---------------------------------------------------------------------------------
    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        own = set(CoreSettings.model_fields)
        for name, field in cls.model_fields.items():
            if name not in own and _part_type(field) is None:
                raise TypeError(f"{cls.__name__}.{name}: the settings hold parts (a "
                                "SettingsPart of the layer that reads them), not settings of "
                                "their own: declare it in a part")
        parts = cls.parts()
        # A name is one setting's, and never a part's: flat names are routed by it.
        seen: dict[str, str] = {name: "core" for name in own}
        seen.update({part: f"{cls.__name__} (as a part)" for part in parts})
        for part, model in parts.items():
            for name in model.model_fields:
                if name in seen:
                    raise TypeError(f"setting {name!r} is declared by both {seen[name]} and "
                                    f"{part}: one name, one setting")
                seen[name] = part

    @classmethod
    def parts(cls) -> dict[str, type[SettingsPart]]:
        """The parts, by the name of the field that holds each."""
        out: dict[str, type[SettingsPart]] = {}
        for name, field in cls.model_fields.items():
            model = _part_type(field)
            if model is not None:
                out[name] = model
        return out

    @classmethod
    def setting_fields(cls) -> dict[str, tuple[str | None, FieldInfo]]:
        """Every setting and table field by its name: the part holding it (None: core's own)
        and its field."""
        fields: dict[str, tuple[str | None, FieldInfo]] = {
            name: (None, field) for name, field in CoreSettings.model_fields.items()}
        for part, model in cls.parts().items():
            fields.update({name: (part, field) for name, field in model.model_fields.items()})
        return fields

    def named_values(self) -> dict[str, Any]:
        """Every setting's value by its name, whichever part holds it."""
        return {name: getattr(self if part is None else getattr(self, part), name)
                for name, (part, _) in self.setting_fields().items()}

    def replaced(self, **values: Any) -> Self:
        """A copy with these settings (by name) replaced in the parts that hold them; like
        ``model_copy``, the values are not validated and the parts not named are shared."""
        fields = self.setting_fields()
        own: dict[str, Any] = {}
        by_part: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            if name not in fields:
                raise TypeError(f"no setting named {name!r}")
            part = fields[name][0]
            if part is None:
                own[name] = value
            else:
                by_part.setdefault(part, {})[name] = value
        for part, update in by_part.items():
            own[part] = getattr(self, part).model_copy(update=update)
        return self.model_copy(update=own)

    @model_validator(mode="before")
    @classmethod
    def _into_parts(cls, data: Any) -> Any:
        """Flat names (from the environment, the file or keywords) into the parts' own."""
        if not isinstance(data, dict):
            return data
        fields = cls.setting_fields()
        nested: dict[str, Any] = {part: {} for part in cls.parts()}
        for key, value in data.items():
            part = fields[key][0] if key in fields else None
            if part is not None:
                nested[part][key] = value
            elif key in nested:
                raise TypeError(f"give the settings of {key!r} by their names (as "
                                "Settings(qdrant_url=...)), not the part whole")
            else:
                nested[key] = value
        return nested

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _EveryVariable(settings_cls))

    # The data folder, and the file ---------------------------------------------------------------
    @property
    def data(self) -> DataFolder:
        return DataFolder(self.data_dir)

    @property
    def config_stamp(self) -> ConfigStamp | None:
        """The config file these settings were read from, as it was then (None: no file)."""
        return self._config_stamp

    def reread(self) -> Self:
        """The settings as the same config file, the environment and the same overrides give
        them now (what ``citewise serve`` reloads). Settings not made by ``load`` read no
        file, and neither do these."""
        if self._overrides is None:
            raise ConfigError("these settings were not read from a config file",
                              hint="start the server with --config or CITEWISE_CONFIG_FILE")
        return self.load(self.config_file, **self._overrides)

    @classmethod
    def load(cls, config_file: Path | str | None = None, **overrides: Any) -> Self:
        """Build settings from the environment, the config file and explicit overrides.

        The config file is, in order: the argument, ``CITEWISE_CONFIG_FILE``, ``./citewise.toml``
        when it exists. Relative paths in the file are taken relative to the file's folder, so
        the same file works from any working directory. The tables' fields come from the file
        alone (none when there is no file).
        """
        path = config_file or os.environ.get("CITEWISE_CONFIG_FILE")
        if path is None and Path("citewise.toml").exists():
            path = "citewise.toml"
        fields = cls.setting_fields()
        file_values: dict[str, Any] = {}
        stamp: ConfigStamp | None = None
        if path is not None:
            path = Path(path).resolve()
            file_values, stamp = cls._read_file(path)
        tables = {k: v for k, v in file_values.items() if k in fields and table_of(fields[k][1])}
        # Environment beats the file: drop file values that the environment sets. A key that
        # names no setting is ignored, as it always was.
        settings_values = {k: v for k, v in file_values.items() if k in fields
                           and k not in tables and f"{ENV_PREFIX}{k.upper()}" not in os.environ}
        given = {k: v for k, v in overrides.items()
                 if not (k in fields and table_of(fields[k][1]))}
        try:
            settings = cls(**{**settings_values, **given, **tables})
        except ValidationError as e:
            raise ConfigError(f"invalid settings: {_describe(e, cls.parts())}") from e
        for source in settings.sources:
            if source.readers is None:
                source.readers = settings.default_readers
        for part in cls.parts():
            getattr(settings, part).loaded()
        settings._config_stamp = stamp
        settings._overrides = dict(overrides)
        return settings

    @classmethod
    def _read_file(cls, path: Path) -> tuple[dict[str, Any], ConfigStamp]:
        """The file's settings by name ([settings], then what its tables hold) and its stamp."""
        raw, stamp = _read_config_file(path)
        unknown = set(raw) - {"settings", *(t.key for t in cls.config_tables)}
        if unknown:
            known = ["[settings]", *(t.spelling for t in cls.config_tables)]
            raise ConfigError(
                f"config file {path} has unknown top-level keys: {sorted(unknown)}",
                hint=f"only {', '.join(known[:-1])} and {known[-1]} are read",
            )
        values = dict(raw.get("settings", {}))
        for table in cls.config_tables:
            try:
                values.update(table.read(raw.get(table.key), path))
            except ValidationError as e:
                raise ConfigError(f"invalid settings: {_describe(e)}") from e
        relative = CoreSettings.relative_paths.union(
            *(model.relative_paths for model in cls.parts().values()))
        for key in relative & set(values):
            values[key] = path.parent / values[key]
        values["config_file"] = path
        return values, stamp


class _EveryVariable(PydanticBaseSettingsSource):
    """``CITEWISE_<NAME>`` for core's settings and every part's, flat (the parts nest in the
    settings; their variables do not), read as pydantic-settings reads a part's own. A table's
    field has no variable."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads them all

    def __call__(self) -> dict[str, Any]:
        settings_cls = self.settings_cls
        assert issubclass(settings_cls, CoreSettings)
        models: list[type[SettingsPart]] = [CoreSettings, *settings_cls.parts().values()]
        values: dict[str, Any] = {}
        for model in models:
            values.update(EnvSettingsSource(model)())
        fields = settings_cls.setting_fields()
        return {k: v for k, v in values.items() if table_of(fields[k][1]) is None}


def _part_type(field: FieldInfo) -> type[SettingsPart] | None:
    model = field.annotation
    if isinstance(model, type) and issubclass(model, SettingsPart) \
            and not issubclass(model, CoreSettings):
        return model
    return None


def _read_config_file(path: Path) -> tuple[dict[str, Any], ConfigStamp]:
    """The file's tables and its stamp, from one read (the digest is of the bytes parsed)."""
    try:
        data = path.read_bytes()
        return tomllib.loads(data.decode("utf-8")), ConfigStamp.of(path, data)
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text: {e}") from e
    except FileNotFoundError as e:
        raise ConfigError(
            f"config file {path} does not exist",
            hint="create it (see citewise.example.toml) or unset CITEWISE_CONFIG_FILE",
        ) from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from e


def _describe(e: ValidationError, parts: Iterable[str] = ()) -> str:
    """The errors by the names the operator uses: a part's name is not one of them."""
    parts = set(parts)
    described = []
    for err in e.errors():
        loc = list(err["loc"])
        if loc and loc[0] in parts:
            loc = loc[1:]
        described.append(f"{'.'.join(str(x) for x in loc)}: {err['msg']}")
    return "; ".join(described)
