"""The search sink: an embedded Tantivy index per table, replaced by key, committed per batch.

``write`` adds the batch to each table's writer under the version guard; ``flush`` commits every
touched index, then atomically replaces the offsets file. Tantivy's Python bindings have no
commit payload, so the offsets cannot be inside the commit; a crash between the two replays the
batch, and the guard makes that harmless: each document keeps the source position of its
change, and a change whose position is not newer than the indexed one (or than the table's last
truncate) is skipped. Deleted keys keep a marker document with their position for the same
reason. The state after any crash and replay is the state of the source up to the last record
applied: no change is lost or applied twice in effect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson

from cdc.contracts.errors import CdcError, RecordError, SinkFatal, SinkUnavailable
from cdc.contracts.sink import SinkContext, SinkRecord, sink_offsets
from cdc.log.base import TopicPartition
from sinks.keyed import Change, Kind, Pos, Table, TopicTables, classify
from sinks.offsets import (
    PositionHolder,
    decode_offsets,
    encode_offsets,
    read_json,
    with_position,
    write_json,
)
from sinks.search.config import SearchSinkConfig, table_dir
from sinks.search.index import Mark, TableIndex, marker_document, row_document, row_text
from sinks.search.types import text_columns


def offsets_file(config: SearchSinkConfig) -> Path:
    """The sink's offsets file (with the consistent source position beside them)."""
    return Path(config.path) / f"_offsets.{config.name}.json"


class SearchSink:
    """Keeps one Tantivy index per table equal to the source rows."""

    def __init__(self, config: SearchSinkConfig, context: SinkContext) -> None:
        self._config = config
        self._context = context
        self._tables = TopicTables(context.pipeline, context.tables)
        self._offsets_file = offsets_file(config)
        self._indexes: dict[Table, TableIndex] = {}
        self._pending: dict[Table, dict[str, Mark]] = {}
        self._offsets: dict[TopicPartition, int] = {}
        # The source position the indexes are consistent up to, kept with the offsets.
        self._position = PositionHolder()

    def open(self) -> None:
        """Open (creating them if missing) the directory and every table's index.

        Raises:
            SinkFatal: the directory cannot be created (retrying cannot help), or holds
                something that is not this sink's.
            SinkUnavailable: another writer holds an index, or an I/O error that may pass.
        """
        root = Path(self._config.path)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SinkFatal(
                f"search: cannot create the index directory {root}: {exc.strerror or exc}"
            ) from exc
        try:
            for table in self._context.tables:
                self._index(table)
            self._offsets = self._read_offsets()
        except (OSError, ValueError) as exc:
            self.close()
            raise _translate(exc, f"cannot open the indexes under {self._config.path}") from exc

    def stored_offsets(self) -> Mapping[TopicPartition, int]:
        return dict(self._offsets)

    def set_consistent_position(self, position: str) -> None:
        """Store ``position`` in the offsets file the next flush writes, after the commits of
        the indexes (:class:`cdc.contracts.sink.PositionedSink`)."""
        self._position.hold(position)

    def write(self, records: Sequence[SinkRecord]) -> None:
        # Classify everything first: a bad record raises before any writer is touched.
        changes = [classify(record, self._tables) for record in records]
        by_table: dict[Table, list[Change]] = {}
        for change in changes:
            by_table.setdefault(change.table, []).append(change)
        try:
            for table, some in by_table.items():
                self._apply(table, some)
        except Exception as exc:
            self._rollback()
            if isinstance(exc, CdcError):
                raise
            raise _translate(exc, "cannot index the batch") from exc
        self._offsets.update(sink_offsets(records))

    def flush(self) -> None:
        try:
            for table in self._pending:
                self._indexes[table].commit()
            position = self._position.to_write(self._offsets)
            self._write_offsets(position)
        except (OSError, ValueError) as exc:
            self._rollback()
            raise _translate(exc, "cannot commit the indexes") from exc
        self._pending.clear()
        self._position.written(position)

    def close(self) -> None:
        for index in self._indexes.values():
            index.close()
        self._indexes.clear()

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        """Empty the table's index (rows, deletion markers, truncate floor) and commit it, then
        store offset 0 for each of ``partitions`` in the offsets file.

        Raises:
            SinkUnavailable: an I/O error that may pass (the runner retries the reset).
            SinkFatal: the index cannot be written.
        """
        try:
            self._index(table).clear()
            self._pending.pop(table, None)
            self._offsets.update(dict.fromkeys(partitions, 0))
            # The table is read again from its start: its rows no longer reach any position.
            self._write_offsets(None)
            self._position.clear()
        except (OSError, ValueError) as exc:
            self._offsets = self._read_offsets()
            raise _translate(exc, f"cannot reset the index of {table[0]}.{table[1]}") from exc

    def _index(self, table: Table) -> TableIndex:
        index = self._indexes.get(table)
        if index is None:
            path = table_dir(self._config, *table)
            index = self._indexes[table] = TableIndex(path, self._config.writer_heap_mb << 20)
        return index

    def _apply(self, table: Table, changes: list[Change]) -> None:
        """Apply one table's changes in order under the guard, truncate by truncate."""
        index = self._index(table)
        pending = self._pending.setdefault(table, {})
        keys = [orjson.dumps(c.key).decode() for c in changes]
        marks = index.marks([k for k in set(keys) if k not in pending])
        marks.update(pending)
        columns = text_columns(self._context.schemas.get(*table))
        start = 0
        for number, change in enumerate(changes):
            if change.kind is not Kind.TRUNCATE:
                continue
            self._write(index, changes[start:number], keys[start:number], marks, columns)
            start = number + 1
            assert change.pos is not None
            if index.floor is None or change.pos > index.floor:
                index.truncate(change.pos)
                marks = {k: m for k, m in marks.items() if m.pos >= change.pos}
        self._write(index, changes[start:], keys[start:], marks, columns)
        pending.clear()
        pending.update(marks)

    @staticmethod
    def _write(
        index: TableIndex,
        changes: list[Change],
        keys: list[str],
        marks: dict[str, Mark],
        columns: frozenset[str] | None,
    ) -> None:
        """Index the final state of each key ``changes`` (no truncate among them) touch.

        Only the last applied change of a key makes a document, and the replaced documents go
        in one delete query: a delete per key costs more than the document it replaces.
        """
        final: dict[str, tuple[Mark, Change]] = {}
        for change, key in zip(changes, keys, strict=True):
            known = final.get(key)
            mark = _decide(change, known[0] if known else marks.get(key), index.floor)
            if mark is not None:
                final[key] = (mark, change)
        index.delete_keys([key for key in final if key in marks])
        for key, (mark, change) in final.items():
            if mark.row is not None:
                text = row_text(mark.row, columns)
                document = row_document(key, mark.pos, mark.offset, mark.row, text)
            else:
                document = marker_document(key, "gone", mark.pos, mark.offset)
            try:
                index.add(document)
            except ValueError as exc:
                raise RecordError(f"search: cannot index the row: {exc}", change.record) from exc
            marks[key] = mark

    def _rollback(self) -> None:
        for table in self._pending:
            self._indexes[table].rollback()
        self._pending.clear()
        self._offsets = self._read_offsets()

    def _read_offsets(self) -> dict[TopicPartition, int]:
        """The offsets file's offsets (its position too, into ``_position``)."""
        stored = read_json(self._offsets_file)
        self._position.load(stored)
        return {} if stored is None else decode_offsets(stored)

    def _write_offsets(self, position: str | None) -> None:
        path = self._offsets_file
        stored = with_position(encode_offsets(self._offsets), position)
        write_json(path, stored, path.with_suffix(".tmp"))


def _decide(change: Change, mark: Mark | None, floor: Pos | None) -> Mark | None:
    """The key's new mark if ``change`` changes the index, else ``None`` (the guard)."""
    if change.kind is Kind.TOMBSTONE:
        # No position: delete only a row nothing at or after this offset has touched.
        if mark is None or mark.row is None or mark.offset >= change.offset:
            return None
        return Mark(mark.pos, change.offset, None)
    assert change.pos is not None
    if (mark is not None and change.pos <= mark.pos) or (floor is not None and change.pos <= floor):
        if change.kind is Kind.DELETE and mark is not None and mark.offset <= change.offset:
            # A skipped delete still covers its own tombstone, which follows it.
            return Mark(mark.pos, change.offset + 1, mark.row)
        return None
    if change.kind is Kind.DELETE:
        # offset + 1: the delete's own tombstone follows it and must change nothing.
        return Mark(change.pos, change.offset + 1, None)
    return Mark(change.pos, change.offset, change.row)


def _translate(exc: Exception, doing: str) -> CdcError:
    text = str(exc)
    # Tantivy's own words; not any "lock" in the text, which a path may hold (".../blocks").
    if "LockBusy" in text or "acquire index lock" in text:
        return SinkUnavailable(f"search: {doing}: another writer holds the index lock ({text})")
    if (isinstance(exc, OSError) and exc.errno is not None) or "(os error" in text:
        # I/O trouble (a full disk, say) may pass: the runner retries the batch.
        return SinkUnavailable(f"search: {doing}: {text}")
    return SinkFatal(f"search: {doing}: {text}")
