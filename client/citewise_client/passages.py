"""What both retrievers attach to a passage: its citation fields, and which of them a model or an
embedding should read along with the text."""

from __future__ import annotations

from typing import Any

from citewise_client.models import SearchHit

# The keys of ``metadata_of``; those that help a model or an embedding read the passage. The
# rest (ids, links, line numbers) are for the application and stay out of their text.
METADATA_KEYS = ("chunk_id", "document_id", "source", "title", "heading", "path", "url",
                 "start_line", "end_line", "symbol", "service", "tags", "citation")
FOR_THE_MODEL = ("title", "heading", "citation", "symbol", "service")
FOR_THE_EMBEDDING = ("title", "heading", "symbol", "service")


def metadata_of(hit: SearchHit) -> dict[str, Any]:
    """Every citation field of the passage (not its text or score), plus ``citation``."""
    fields: dict[str, Any] = {key: getattr(hit, key) for key in METADATA_KEYS[:-1]}
    fields["tags"] = list(hit.tags)
    fields["citation"] = hit.citation
    return fields
