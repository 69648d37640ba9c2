"""A search that the live index keeps switching under gives up with a retryable error.

Search pins one index generation for its queries and checks, after them, that the catalog's
pointer has not moved (``retrieval/search.py``); when it has, it asks the new generation. The
store below plays a `citewise reindex` in another process that switches the pointer after
every query, the worst case: after three tries the search must say "retry" (503), never return
hits checked against another generation's versions.
"""

from __future__ import annotations

import pytest

from citewise.errors import BackendError
from citewise.index.generations import LIVE, LiveIndex, next_generation
from citewise.index.qdrant_edge_index import EdgeIndexStore
from citewise.index.sparse import Bm25Encoder
from citewise.index.sqlite_catalog import SqliteDocumentCatalog
from citewise.retrieval.search import SearchService
from citewise.sqlite import SqliteDatabase
from citewise.types import Identity

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")


class SwitchedAfterEveryQuery:
    """An edge store whose generations, once searched, see the pointer moved to a new one."""

    def __init__(self, store: EdgeIndexStore, catalog: SqliteDocumentCatalog) -> None:
        self.store = store
        self.catalog = catalog
        self.switches = 0

    def open(self, generation: str):
        index = self.store.open(generation)
        original = index.search

        def search(*args, **kwargs):
            hits = original(*args, **kwargs)
            new = next_generation(*self.store.names())
            self.store.open(new).close()
            self.catalog.set_meta(LIVE, new)
            self.switches += 1
            return hits

        index.search = search
        return index

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_a_search_switched_under_every_try_asks_for_a_retry(tmp_path):
    catalog = SqliteDocumentCatalog(SqliteDatabase(tmp_path / "catalog.db"))
    store = SwitchedAfterEveryQuery(EdgeIndexStore(tmp_path / "qdrant", 4), catalog)
    live = LiveIndex(catalog, store)
    search = SearchService(catalog=catalog, index=live, dense=None,  # type: ignore[arg-type]
                           sparse=Bm25Encoder())
    with pytest.raises(BackendError, match="switched to a new generation 3 times") as raised:
        search.search("restart the cache", Identity(), mode="sparse")
    assert raised.value.status_code == 503 and "retry" in raised.value.hint
    assert store.switches == 3  # one query per try, each on the generation it pinned
    live.close()
    catalog.close()
