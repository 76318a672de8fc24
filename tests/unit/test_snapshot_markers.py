"""source.snapshot markers of an exported snapshot's rows (Debezium's first/last rules)."""

from __future__ import annotations

import orjson

from cdc.contracts.events import Op, SourceInfo
from cdc.envelope.template import RecordTemplate
from cdc.log.base import Record
from connectors.postgres.snapshot.markers import SnapshotMarks
from connectors.postgres.snapshot.parallel import Piece


def _template(table: str, flag: str) -> RecordTemplate:
    src = SourceInfo("postgresql", "db", "public", table, 1, 9, 0, flag, 759)
    return RecordTemplate.of(Op.READ, src, "p")


def _records(table: str, ids: range) -> list[Record]:
    template = _template(table, "true")
    return [
        Record(
            f"p.public.{table}",
            b'{"id":%d}' % i,
            template.value(b'{"id":%d}' % i, b"null", b"", 5),
            template.pos(i),
        )
        for i in ids
    ]


def _flags(records: list[Record]) -> list[tuple[str, int, str]]:
    out = []
    for record in records:
        value = orjson.loads(record.value or b"null")
        out.append((value["source"]["table"], value["after"]["id"], value["source"]["snapshot"]))
    return out


def _run(
    chunks: dict[str, int], pieces: list[Piece]
) -> tuple[list[Record], list[tuple[str, int, int]]]:
    marks = SnapshotMarks(chunks, _template)
    written, ends = [], []
    for piece in pieces:
        records, done = marks.feed(piece)
        written += records
        ends += done
    records, done = marks.finish()
    return written + records, ends + done


def test_first_last_and_per_table_markers_as_debezium() -> None:
    pieces = [
        Piece("a", 0, _records("a", range(1, 4)), last=False),
        Piece("a", 0, [], last=True, rows=3),
        Piece("b", 0, _records("b", range(10, 13)), last=False),
        Piece("b", 0, [], last=True, rows=3),
    ]
    written, ends = _run({"a": 1, "b": 1}, pieces)
    assert sorted(_flags(written)) == [
        ("a", 1, "first"),
        ("a", 2, "true"),
        ("a", 3, "last_in_data_collection"),
        ("b", 10, "first_in_data_collection"),
        ("b", 11, "true"),
        ("b", 12, "last"),
    ]
    assert sorted(ends) == [("a", 0, 3), ("b", 0, 3)]
    # the marked values are otherwise byte for byte what the template wrote
    assert written[0].value == _records("a", range(1, 2))[0].value.replace(  # type: ignore[union-attr]
        b'"snapshot":"true"', b'"snapshot":"first"'
    )


def test_a_chunk_is_not_done_while_its_last_row_is_held() -> None:
    marks = SnapshotMarks({"a": 2, "b": 1}, _template)
    records, ends = marks.feed(Piece("a", 0, _records("a", range(1, 3)), last=False))
    assert [r.key for r in records] == [b'{"id":1}'] and ends == []
    records, ends = marks.feed(Piece("a", 0, [], last=True, rows=2))
    assert records == [] and ends == []  # row 2 is held: chunk 0 is not done yet
    records, ends = marks.feed(Piece("a", 1, _records("a", range(3, 4)), last=False))
    assert [r.key for r in records] == [b'{"id":2}'] and ends == [("a", 0, 2)]
    records, ends = marks.feed(Piece("a", 1, [], last=True, rows=1))
    assert records == [] and ends == []  # table a is done; its last row waits for the next
    records, ends = marks.feed(Piece("b", 0, [], last=True, rows=0))  # b is empty
    assert records == [] and ends == [("b", 0, 0)]
    records, ends = marks.finish()
    assert _flags(records) == [("a", 3, "last")] and ends == [("a", 1, 1)]


def test_single_row_tables_take_debeziums_precedence() -> None:
    pieces = [
        Piece("a", 0, _records("a", range(1, 2)), last=True, rows=1),
        Piece("b", 0, _records("b", range(2, 3)), last=True, rows=1),
        Piece("c", 0, _records("c", range(3, 4)), last=True, rows=1),
    ]
    written, ends = _run({"a": 1, "b": 1, "c": 1}, pieces)
    assert _flags(written) == [
        ("a", 1, "first"),  # first beats last_in_data_collection
        ("b", 2, "last_in_data_collection"),  # which beats first_in_data_collection
        ("c", 3, "last"),
    ]
    assert len(ends) == 3


def test_only_empty_tables_have_no_markers() -> None:
    written, ends = _run({"a": 1}, [Piece("a", 0, [], last=True, rows=0)])
    assert written == [] and ends == [("a", 0, 0)]


def test_an_unfinished_snapshot_flushes_what_it_holds() -> None:
    marks = SnapshotMarks({"a": 2, "b": 1}, _template)
    marks.feed(Piece("b", 0, _records("b", range(1, 3)), last=False))
    marks.feed(Piece("b", 0, [], last=True, rows=2))  # b is done: its last row waits
    records, ends = marks.feed(Piece("a", 0, _records("a", range(5, 7)), last=False))
    assert ("b", 2, "last_in_data_collection") in _flags(records) and ends == [("b", 0, 2)]
    marks.feed(Piece("a", 0, [], last=True, rows=2))  # a is not done: chunk 1 is to come
    records, ends = marks.flush()  # chunk 1 of a failed
    assert _flags(records) == [("a", 6, "true")] and ends == [("a", 0, 2)]
    assert marks.finish() == ([], [])
