"""The chunk payload: what a point carries, and how one written by an older version reads."""

from __future__ import annotations

from citewise.index.payload import ChunkPayload, DocumentPayload
from citewise.types import Chunk

DOCUMENT = DocumentPayload(document_id="d", version="v1", source="code", readers=["public"],
                           title="fetch.js", path="partner/fetch.js")


def test_a_chunk_part_of_a_split_definition_is_marked_in_its_payload():
    part = Chunk(document_id="d", ordinal=2, text="  const response = await get(url);",
                 heading="function fetchPage", start_line=10, end_line=13,
                 symbol="function fetchPage", continues_symbol=True)
    payload = ChunkPayload.for_chunk(DOCUMENT, part).to_payload()
    assert payload["continues_symbol"] is True and payload["symbol"] == "function fetchPage"
    assert ChunkPayload.from_payload(payload).continues_symbol is True


def test_a_payload_written_before_the_mark_reads_as_not_known():
    """Points of an index built before chunks were marked have no such key: ``None`` (not
    known), which readers tell apart from ``False`` (the chunk starts its definition)."""
    stored = ChunkPayload.for_chunk(DOCUMENT, Chunk(document_id="d", ordinal=0, text="x",
                                                    heading="h")).to_payload()
    del stored["continues_symbol"]
    stored["a_key_of_a_later_version"] = 1
    old = ChunkPayload.from_payload(stored)
    assert old.continues_symbol is None and old.text == "x"


def test_a_payload_is_what_asdict_gives_and_owns_its_lists_and_metadata():
    """``to_payload`` skips ``asdict``'s generic recursion (ingest's CPU): the same dict, key
    order included, and copies of the document's lists and nested metadata, so one chunk's
    payload changed later cannot change another's."""
    from dataclasses import asdict

    document = DocumentPayload(document_id="d", version="v1", source="wiki",
                               readers=["group:sre"], title="Failover", tags=["redis"],
                               path_prefixes=["a", "a/b.md"],
                               meta={"breadcrumb": ["Ops", "Redis"], "labels": {"tier": 1}})
    chunk = Chunk(document_id="d", ordinal=1, text="Promote the replica.", heading="Steps",
                  start_line=3, end_line=5)
    first = ChunkPayload.for_chunk(document, chunk)
    payload = first.to_payload()
    assert payload == asdict(first) and list(payload) == list(asdict(first))
    payload["readers"].append("public")
    payload["meta"]["breadcrumb"].append("x")
    payload["meta"]["labels"]["tier"] = 2
    again = ChunkPayload.for_chunk(document, chunk).to_payload()
    assert again["readers"] == ["group:sre"]
    assert again["meta"] == {"breadcrumb": ["Ops", "Redis"], "labels": {"tier": 1}}
