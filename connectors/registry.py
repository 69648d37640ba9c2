"""Connector types by name, as the config file's ``type = "..."`` refers to them."""

from __future__ import annotations

from pathlib import Path

from citewise.connectors.base import ConfigurableLoad, ConfigurableSync
from citewise.connectors.beir import BeirCorpusConnector
from citewise.connectors.confluence import ConfluenceConnector
from citewise.connectors.folder import FolderConnector
from citewise.connectors.git import GitConnector
from citewise.errors import ConfigError
from citewise.settings import SourceConfig

CONNECTOR_TYPES: dict[str, type[ConfigurableLoad] | type[ConfigurableSync]] = {
    FolderConnector.source_type: FolderConnector,
    BeirCorpusConnector.source_type: BeirCorpusConnector,
    GitConnector.source_type: GitConnector,
    ConfluenceConnector.source_type: ConfluenceConnector,
}


def build_connector(source: SourceConfig, *, data_dir: Path | None = None
                    ) -> ConfigurableLoad | ConfigurableSync:
    """The source's connector. ``data_dir`` is where a connector may keep working files
    (a git clone); connectors that keep none ignore it. ``source.readers`` may be None: a
    connector that needs default readers (folder, git) refuses to start without them."""
    try:
        cls = CONNECTOR_TYPES[source.type]
    except KeyError:
        raise ConfigError(
            f"source {source.name!r} has unknown type {source.type!r}",
            hint=f"known types: {', '.join(sorted(CONNECTOR_TYPES))}",
        ) from None
    return cls.from_options(source.options(), source.readers, data_dir=data_dir or Path("data"))
