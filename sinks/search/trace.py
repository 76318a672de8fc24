"""One key's state in a Tantivy index, for ``cdc trace``: its row and the position stored with
it (``_lsn``/``_seq``), or a deleted key's marker."""

from __future__ import annotations

from typing import Any

import orjson
import tantivy

from sinks.search.config import SearchSinkConfig, table_dir
from sinks.search.index import SCHEMA, open_reader

KeyState = tuple[dict[str, Any] | None, tuple[int, int] | None]


def read_key(
    config: SearchSinkConfig,
    schema: str,
    table: str,
    key: dict[str, Any],
    *,
    pipeline: str | None = None,
    any_type: bool = False,
) -> KeyState | None:
    """``(row, (position, sequence))`` of ``key`` (its columns in key order, as the record key
    has them); ``(None, position)`` for a deleted key's marker; ``None``: nothing of it."""
    path = table_dir(config, schema, table)
    if not path.exists():
        return None
    searcher = open_reader(path).searcher()
    term = tantivy.Query.term_query(SCHEMA, "_key", orjson.dumps(key).decode())
    hits = searcher.search(term, limit=1, count=False).hits
    if not hits:
        return None
    doc = searcher.doc(hits[0][1])
    source = doc.get_first("_source")
    lsn, seq = doc.get_first("_lsn"), doc.get_first("_seq")
    position = None if lsn is None or seq is None else (int(lsn), int(seq))
    return (None if source is None else orjson.loads(source)), position
