"""The ``git`` connector: code, docs and config of a repository, synced commit by commit.

* ``config.py``: the source's settings and how citations link to the code host;
* ``repo.py``: running git (fetch or locate, trees, diffs, history, blobs, credentials);
* ``files.py``: which files are indexed, and as what (prose, or code in a language);
* ``connector.py``: the sync protocol over all of that.
"""

from citewise.connectors.git.config import GitConfig
from citewise.connectors.git.connector import GitConnector
from citewise.connectors.git.files import classify

__all__ = ["GitConfig", "GitConnector", "classify"]
