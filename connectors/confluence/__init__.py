"""Confluence Cloud and Data Center pages as a knowledge source (see ``connector.py``)."""

from citewise.connectors.confluence.connector import ConfluenceConnector

__all__ = ["ConfluenceConnector"]
