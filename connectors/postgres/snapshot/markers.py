"""``source.snapshot`` of an exported snapshot's rows, as Debezium marks them.

Debezium writes ``first`` on the first row of all, ``first_in_data_collection`` on the first
row of each later table, ``last_in_data_collection`` on the last row of each table but the
last, ``last`` on the last row of all, and ``true`` in between; when one row is both, ``last``
beats ``first``, which beats ``last_in_data_collection``, which beats
``first_in_data_collection`` (its ``setSnapshotMarker``). The workers write every row ``true``
(the native encoder writes a chunk's rows with one template); the poll thread re-marks the few
rows that need it here, through :meth:`RecordTemplate.marked`.

"First" and "last" are in the order the rows reach the log: chunks are read in parallel, so a
table's last row is the last one its final chunk to finish handed over. That is known only
once every chunk of the table is done, so the latest row of each table is held back until the
next one of the table comes (it was not the last) or the table finishes (it was). A finished
table's last row waits for the next row of any table (then it is
``last_in_data_collection``) or the end of the snapshot (``last``): so an empty table at the
end does not leave the snapshot without its ``last``. A chunk whose row is held is reported
done only when the row is released, so a commit never stores a chunk as done while one of its
rows is still to be written. An empty table has no row to mark; a snapshot of only empty
tables has no ``first`` or ``last`` (Debezium's has none either).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from cdc.envelope.template import RecordTemplate
from cdc.log.base import Record
from connectors.postgres.snapshot.parallel import Piece

FIRST, FIRST_IN, TRUE = "first", "first_in_data_collection", "true"
LAST, LAST_IN = "last", "last_in_data_collection"

#: A chunk's end as the snapshot state takes it: ``(table, chunk, rows)``.
ChunkEnd = tuple[str, int, int]
#: The template of a table's rows with a given ``source.snapshot``.
TemplateOf = Callable[[str, str], RecordTemplate]


@dataclass(slots=True)
class _Held:
    record: Record
    chunk: int
    flag: str
    ends: list[ChunkEnd] = field(default_factory=list)  # chunk ends waiting on this row


class SnapshotMarks:
    """Re-marks the first and last rows of an exported snapshot (see the module docstring).

    Args:
        chunks: each table's number of chunks.
        template_of: ``(table, flag)`` -> the template the rows of ``table`` are written with
            under ``flag`` (the same but for ``source.snapshot``).
    """

    def __init__(self, chunks: dict[str, int], template_of: TemplateOf) -> None:
        self._remaining = dict(chunks)
        self._template_of = template_of
        self._templates: dict[tuple[str, str], RecordTemplate] = {}
        self._seen: set[str] = set()
        self._held: dict[str, _Held] = {}
        self._final: tuple[str, _Held] | None = None  # a finished table's last row

    def feed(self, piece: Piece) -> tuple[list[Record], list[ChunkEnd]]:
        """The records of ``piece`` to write now, and the chunk ends to report now."""
        out: list[Record] = []
        ends: list[ChunkEnd] = []
        name = piece.table
        if piece.records:
            records, flag = self._first(name, piece.records)
            self._release_final(out, ends)
            held = self._held.pop(name, None)
            if held is not None:
                out.append(held.record)
                ends.extend(held.ends)
            out.extend(records[:-1])
            self._held[name] = _Held(records[-1], piece.chunk, flag if len(records) == 1 else TRUE)
        if piece.last:
            self._chunk_end(piece, out, ends)
        return out, ends

    def finish(self) -> tuple[list[Record], list[ChunkEnd]]:
        """What is still held once every chunk is read: the last row of all, ``last``."""
        out: list[Record] = []
        ends: list[ChunkEnd] = []
        for name in list(self._held):  # only a table whose chunk ends never came (not expected)
            self._finish_table(name, out, ends)
        if self._final is not None:
            name, held = self._final
            self._final = None
            out.append(self._remark(name, held, LAST))
            ends.extend(held.ends)
        return out, ends

    def flush(self) -> tuple[list[Record], list[ChunkEnd]]:
        """Every row held, as it is, for a snapshot that stops unfinished (a chunk failed): its
        read chunks are still stored as done. None of them is the last of all."""
        out: list[Record] = []
        ends: list[ChunkEnd] = []
        self._release_final(out, ends)
        for held in self._held.values():
            out.append(held.record)
            ends.extend(held.ends)
        self._held.clear()
        return out, ends

    def _first(self, name: str, records: list[Record]) -> tuple[list[Record], str]:
        if name in self._seen:
            return records, TRUE
        flag = FIRST if not self._seen else FIRST_IN
        self._seen.add(name)
        head = replace(records[0], value=self._mark(name, records[0], TRUE, flag))
        return [head, *records[1:]], flag

    def _chunk_end(self, piece: Piece, out: list[Record], ends: list[ChunkEnd]) -> None:
        name = piece.table
        end = (name, piece.chunk, piece.rows)
        held = self._held.get(name)
        if held is not None and held.chunk == piece.chunk:
            held.ends.append(end)
        else:
            ends.append(end)
        self._remaining[name] = self._remaining.get(name, 1) - 1
        if self._remaining[name] <= 0:
            self._finish_table(name, out, ends)

    def _finish_table(self, name: str, out: list[Record], ends: list[ChunkEnd]) -> None:
        held = self._held.pop(name, None)
        if held is None:
            return  # an empty table: no row to mark
        self._release_final(out, ends)
        self._final = (name, held)

    def _release_final(self, out: list[Record], ends: list[ChunkEnd]) -> None:
        if self._final is None:
            return
        name, held = self._final
        self._final = None
        out.append(self._remark(name, held, FIRST if held.flag == FIRST else LAST_IN))
        ends.extend(held.ends)

    def _remark(self, name: str, held: _Held, flag: str) -> Record:
        if flag == held.flag:
            return held.record
        return replace(held.record, value=self._mark(name, held.record, held.flag, flag))

    def _mark(self, name: str, record: Record, was: str, flag: str) -> bytes:
        assert record.value is not None
        return self._template(name, was).marked(record.value, self._template(name, flag))

    def _template(self, name: str, flag: str) -> RecordTemplate:
        template = self._templates.get((name, flag))
        if template is None:
            template = self._templates[(name, flag)] = self._template_of(name, flag)
        return template
