"""One Tantivy index per table, with a fixed schema that any table (and any added column) fits.

Fields of every document:

- ``_key`` (raw, stored): the key as JSON, ``{"id":42}``; replace and delete go by this term.
- ``_kind`` (raw, stored): ``row``; ``gone`` for a deleted row's marker (kept so an older
  replayed change cannot bring the row back); ``truncate`` for the table's truncate marker.
- ``_lsn``, ``_seq`` (u64, stored, fast): the source position ``pos`` of the last change applied.
- ``_off`` (u64, stored): the offset up to which the key's records are done (tombstones, which
  carry no position, are compared by offset).
- ``_source`` (bytes, stored): the row's JSON exactly as it came (decimals, timestamps, nesting).
- ``row`` (JSON, indexed): every column, so ``row.qty:3`` or ``row.name:alice`` work, and a new
  column needs no schema change.
- ``text`` (text, indexed): the table's text columns, the default field of a query.
"""

from __future__ import annotations

from binascii import b2a_base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import tantivy

from sinks.keyed import Pos

TRUNCATE_KEY = "__truncate__"  # never a key: keys are JSON objects


class Mark(NamedTuple):
    """What the index holds for a key: position applied, offset done, the row (None: gone)."""

    pos: Pos
    offset: int
    row: dict[str, Any] | None


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("_key", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("_kind", stored=True, tokenizer_name="raw", index_option="basic")
    # Fast fields only: the truncate's range query reads them column-wise; no postings needed.
    builder.add_unsigned_field("_lsn", stored=True, fast=True)
    builder.add_unsigned_field("_seq", stored=True, fast=True)
    builder.add_unsigned_field("_off", stored=True)
    builder.add_bytes_field("_source", stored=True)
    # Positions only in ``text`` (phrases); per-column queries match terms, which keeps
    # indexing (and each batch's commit) cheaper.
    builder.add_json_field("row", tokenizer_name="default", index_option="basic")
    builder.add_text_field("text", tokenizer_name="default")
    return builder.build()


SCHEMA = build_schema()


def row_text(row: dict[str, Any], columns: frozenset[str] | None) -> str:
    """The searchable text of a row: its text columns' values, array elements included."""
    parts: list[str] = []
    for name, value in row.items():
        if columns is not None and name not in columns:
            continue
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list) and columns is not None:
            parts.extend(v for v in value if isinstance(v, str))
    return "\n".join(parts)


def row_document(key: str, pos: Pos, offset: int, row: dict[str, Any], text: str) -> str:
    """The JSON ``IndexWriter.add_json`` takes for a live row."""
    source = orjson.dumps(row)
    head = orjson.dumps(
        {
            "_key": key,
            "_kind": "row",
            "_lsn": pos[0],
            "_seq": pos[1],
            "_off": offset,
            "_source": b2a_base64(source, newline=False).decode(),
            "text": text,
        }
    )
    # The row is serialised once: spliced in as the JSON field rather than dumped again.
    return (head[:-1] + b',"row":' + source + b"}").decode()


def marker_document(key: str, kind: str, pos: Pos, offset: int) -> str:
    return orjson.dumps(
        {"_key": key, "_kind": kind, "_lsn": pos[0], "_seq": pos[1], "_off": offset}
    ).decode()


def before(pos: Pos) -> tantivy.Query:
    """Documents whose position is older than ``pos``."""
    unsigned = tantivy.FieldType.Unsigned
    older_lsn = tantivy.Query.range_query(SCHEMA, "_lsn", unsigned, None, pos[0], True, False)
    same_lsn = tantivy.Query.range_query(SCHEMA, "_lsn", unsigned, pos[0], pos[0])
    older_seq = tantivy.Query.range_query(SCHEMA, "_seq", unsigned, None, pos[1], True, False)
    same_older = tantivy.Query.boolean_query(
        [(tantivy.Occur.Must, same_lsn), (tantivy.Occur.Must, older_seq)]
    )
    return tantivy.Query.boolean_query(
        [(tantivy.Occur.Should, older_lsn), (tantivy.Occur.Should, same_older)]
    )


class TableIndex:
    """The index of one table and its single writer."""

    def __init__(self, path: Path, heap_bytes: int) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.index = tantivy.Index(SCHEMA, path=str(path), reuse=True)
        self.writer = self.index.writer(heap_size=heap_bytes, num_threads=1)
        # A killed process can leave files its commit never recorded. Tantivy names a delete
        # file by segment and opstamp, and the opstamp restarts from the last commit, so the
        # same changes applied again would write the same name and the commit would fail
        # (FileAlreadyExists after a SIGKILL). Unrecorded files are removed first.
        self.writer.garbage_collect_files()
        self.searcher = self.index.searcher()
        self.floor = self._committed_floor()

    def _committed_floor(self) -> Pos | None:
        """The position of the table's last committed truncate."""
        found = self.marks([TRUNCATE_KEY]).get(TRUNCATE_KEY)
        return found.pos if found else None

    def marks(self, keys: list[str]) -> dict[str, Mark]:
        """The committed mark of each key the index holds (rows and deletion markers)."""
        if not keys:
            return {}
        query = tantivy.Query.term_set_query(SCHEMA, "_key", keys)
        hits = self.searcher.search(query, limit=len(keys), count=False).hits
        found: dict[str, Mark] = {}
        for _, address in hits:
            doc = self.searcher.doc(address)
            pos = (_first(doc, "_lsn"), _first(doc, "_seq"))
            source = _first(doc, "_source")
            row = orjson.loads(source) if source is not None else None
            found[_first(doc, "_key")] = Mark(pos, _first(doc, "_off"), row)
        return found

    def delete_keys(self, keys: list[str]) -> None:
        """Delete the documents of ``keys``: every one added before, uncommitted ones too."""
        if keys:
            self.writer.delete_documents_by_query(
                tantivy.Query.term_set_query(SCHEMA, "_key", keys)
            )

    def add(self, document: str) -> None:
        self.writer.add_json(document)

    def truncate(self, pos: Pos) -> None:
        """Delete every document older than ``pos`` and record ``pos`` as the table's floor."""
        self.writer.delete_documents_by_query(before(pos))
        self.writer.delete_documents_by_term("_key", TRUNCATE_KEY)
        self.writer.add_json(marker_document(TRUNCATE_KEY, "truncate", pos, 0))
        self.floor = pos

    def commit(self) -> None:
        self.writer.commit()
        self.index.reload()
        self.searcher = self.index.searcher()

    def rollback(self) -> None:
        self.writer.rollback()
        self.floor = self._committed_floor()

    def clear(self) -> None:
        """Delete every document, truncate marker included, and commit."""
        self.writer.delete_all_documents()
        self.commit()
        self.floor = None

    def close(self) -> None:
        self.writer.wait_merging_threads()


def open_reader(path: Path) -> tantivy.Index:
    """An index for reading only (no writer lock): ``cdc search`` works while a sink runs."""
    return tantivy.Index.open(str(path))


def live_rows(index: tantivy.Index) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Every live row of an index as ``(key, row)``."""
    searcher = index.searcher()
    query = tantivy.Query.term_query(SCHEMA, "_kind", "row")
    for _, address in searcher.search(query, limit=max(1, searcher.num_docs), count=False).hits:
        doc = searcher.doc(address)
        yield orjson.loads(_first(doc, "_key")), orjson.loads(_first(doc, "_source"))


def search_rows(index: tantivy.Index, query: str, limit: int) -> list[dict[str, Any]]:
    """Rows matching ``query`` (Tantivy's query language; ``text`` is the default field)."""
    parsed = index.parse_query(query, ["text"])
    live = tantivy.Query.term_query(SCHEMA, "_kind", "row")
    both = tantivy.Query.boolean_query([(tantivy.Occur.Must, parsed), (tantivy.Occur.Must, live)])
    searcher = index.searcher()
    hits = searcher.search(both, limit=limit).hits
    return [orjson.loads(_first(searcher.doc(address), "_source")) for _, address in hits]


def _first(doc: tantivy.Document, field: str) -> Any:
    """A stored field's value; the schema fixes its type, the bindings' stubs cannot."""
    return doc.get_first(field)
