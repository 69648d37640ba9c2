"""Connector types by name, as the config file's ``type = "..."`` refers to them."""

from __future__ import annotations

from citewise.connectors.folder import FolderConnector
from citewise.errors import ConfigError
from citewise.settings import SourceConfig

CONNECTOR_TYPES = {FolderConnector.source_type: FolderConnector}


def build_connector(source: SourceConfig):
    try:
        cls = CONNECTOR_TYPES[source.type]
    except KeyError:
        raise ConfigError(
            f"source {source.name!r} has unknown type {source.type!r}",
            hint=f"known types: {', '.join(sorted(CONNECTOR_TYPES))}",
        ) from None
    return cls.from_options(source.options(), source.readers)
