"""The assembler without a server: pgoutput messages in, events and batches out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest
import structlog

from cdc.contracts.errors import SourceFatal
from cdc.contracts.events import Op
from cdc.envelope.encode import encode_key
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.assembler import Assembler
from connectors.postgres.assembly.relation_state import check_keyable
from connectors.postgres.assembly.toast import ToastFiller
from connectors.postgres.catalog import TableInfo
from connectors.postgres.types import ConversionError, TypeRegistry

INT4, TEXT, JSON = 23, 25, 114
U = pg.UNCHANGED
TOPIC = "p.public.t"


class FakeCatalog:
    def __init__(self) -> None:
        # key values -> the text of the columns a fallback read asks for
        self.rows: dict[tuple[str | None, ...], tuple[str | None, ...]] = {}
        self.reads: list[Sequence[str]] = []
        self.toastable: list[str] = []  # what toastable_columns answers

    def load_types(self, registry: TypeRegistry, oids: Sequence[int]) -> None:
        return None

    def not_null(self, oid: int) -> set[str]:
        return {"id"}

    def array_dims(self, oid: int) -> dict[str, int]:
        return {}

    def read_row(
        self, schema: str, table: str, columns: Sequence[str], key: dict[str, str | None]
    ) -> tuple[str | None, ...] | None:
        self.reads.append(columns)
        return self.rows.get(tuple(key.values()))

    def toastable_columns(self, schema: str, table: str) -> list[str]:
        return self.toastable


class FakeLog:
    """What the assembler asks of a log: ``keep_latest`` and ``latest_value``."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, bytes], bytes] = {}
        self.kept: list[dict[str, list[str]]] = []

    def keep_latest(self, fields: dict[str, list[str]]) -> None:
        self.kept.append({topic: list(columns) for topic, columns in fields.items()})

    def latest_value(self, topic: str, key: bytes) -> bytes | None:
        return self.values.get((topic, key))


def _assembler(
    catalog: FakeCatalog,
    log: FakeLog,
    on_bad_record: str = "fail",
    identity: str = "d",
    last_commit: int | None = None,
) -> Assembler:
    info = TableInfo("public", "t", 1, identity, ("id",))
    logger = structlog.get_logger()
    return Assembler(
        "p",
        "db",
        {("public", "t"): info},
        {},
        catalog,
        ToastFiller(log, logger),  # type: ignore[arg-type]
        on_bad_record,
        logger,
        last_commit=last_commit,
    )


def _relation(*names: str, identity: str = "d", types: Sequence[int] = ()) -> pg.Relation:
    types = list(types) or [INT4] + [TEXT] * (len(names) - 1)
    columns = tuple(
        pg.RelationColumn(n == "id", n, t, -1) for n, t in zip(names, types, strict=True)
    )
    return pg.Relation(1, "public", "t", identity, columns)


def _tx(asm: Assembler, *messages: Any, xid: int = 7, lsn: int = 100) -> Any:
    asm.handle(pg.Begin(lsn, 0, xid), 0)
    for i, message in enumerate(messages):
        asm.handle(message, lsn + i + 1)
    asm.handle(pg.Commit(0, lsn, lsn + 50, 0), 0)
    return asm.take()


def test_commit_order_positions_and_offsets() -> None:
    asm = _assembler(FakeCatalog(), FakeLog())
    batch = _tx(asm, _relation("id", "v"), pg.Insert(1, ("1", "a")), pg.Insert(1, ("2", None)))
    assert [e.after for e in batch.events] == [{"id": 1, "v": "a"}, {"id": 2, "v": None}]
    assert [(e.source.position, e.source.sequence) for e in batch.events] == [(100, 0), (100, 1)]
    # lsn_commit: the commit's end, source.sequence's first LSN after a restart (Debezium's)
    assert batch.commit_offsets == {"postgres": {"lsn": 150, "lsn_str": "0/96", "lsn_commit": 150}}
    [schema] = batch.schemas
    assert schema.key_columns == ["id"] and [c.nullable for c in schema.columns] == [False, True]


def test_key_change_is_delete_then_create() -> None:
    asm = _assembler(FakeCatalog(), FakeLog())
    batch = _tx(asm, _relation("id", "v"), pg.Update(1, ("1", None), "K", ("2", "x")))
    delete, create = batch.events
    # Debezium's key-only before: every column, the nullable non-key one null.
    assert (delete.op, delete.key, delete.before) == (Op.DELETE, {"id": 1}, {"id": 1, "v": None})
    assert (create.op, create.key, create.after) == (Op.CREATE, {"id": 2}, {"id": 2, "v": "x"})


def test_toast_fill_prefers_old_image_then_batch_then_log_then_table() -> None:
    catalog, log = FakeCatalog(), FakeLog()
    asm = _assembler(catalog, log)
    rel = _relation("id", "v", "big")
    log.values[(TOPIC, encode_key({"id": 1}))] = orjson.dumps({"after": {"big": "from-log"}})
    catalog.rows[("2",)] = ("from-table",)
    batch = _tx(
        asm,
        rel,
        pg.Update(1, None, None, ("1", "a", U)),  # previous image in the log
        pg.Update(1, None, None, ("1", "b", U)),  # the image emitted just before
        pg.Update(1, None, None, ("2", "c", U)),  # nothing known: read the row
    )
    first, second, third = (e.after["big"] for e in batch.events if e.after)
    assert (first, second, third) == ("from-log", "from-log", "from-table")
    assert batch.events[2].source.extra["toast_fallback"] is True
    assert catalog.reads == [["big"]]


def test_fallback_reads_are_counted_and_a_gone_row_is_flagged() -> None:
    catalog, log = FakeCatalog(), FakeLog()
    asm = _assembler(catalog, log)
    catalog.rows[("1",)] = ("from-table",)
    batch = _tx(
        asm,
        _relation("id", "v", "big"),
        pg.Update(1, None, None, ("1", "a", U)),
        pg.Update(1, None, None, ("3", "a", U)),  # no row any more
    )
    read, gone = batch.events
    assert read.after is not None and read.after["big"] == "from-table"
    assert gone.after is not None and gone.after["big"] is None
    assert gone.source.extra["toast_unavailable"] == ["big"]
    assert (asm._toast.fallback_reads, asm._toast.unavailable) == (1, 1)


def test_a_relation_message_declares_its_toastable_columns_when_they_change() -> None:
    catalog, log = FakeCatalog(), FakeLog()
    asm = _assembler(catalog, log)
    catalog.toastable = ["v"]
    _tx(asm, _relation("id", "v"), pg.Insert(1, ("1", "a")))
    _tx(asm, _relation("id", "v"), pg.Insert(1, ("2", "a")))  # unchanged: not declared again
    catalog.toastable = ["v", "big"]
    _tx(asm, _relation("id", "v", "big"), pg.Insert(1, ("3", "a", "b")))
    assert log.kept == [{TOPIC: ["v"]}, {TOPIC: ["v", "big"]}]


def test_shape_change_cuts_the_batch_before_the_new_schema() -> None:
    asm = _assembler(FakeCatalog(), FakeLog())
    asm.handle(pg.Begin(100, 0, 7), 0)
    asm.handle(_relation("id", "v"), 0)
    asm.handle(pg.Insert(1, ("1", "a")), 101)
    asm.handle(_relation("id", "v", "w"), 0)
    assert asm.cut
    first = asm.take()
    assert first.commit_offsets is None and len(first.events) == 1 and len(first.schemas) == 1
    asm.handle(pg.Insert(1, ("2", "b", "c")), 102)
    asm.handle(pg.Commit(0, 100, 150, 0), 0)
    second = asm.take()
    assert [c.name for c in second.schemas[0].columns] == ["id", "v", "w"]
    assert second.events[0].after == {"id": 2, "v": "b", "w": "c"}


def test_bad_value_fails_or_becomes_a_dead_letter() -> None:
    rel = _relation("id", "n", types=[INT4, INT4])
    bad = pg.Insert(1, ("1", "one"))  # (json is a string of its text now: any text is valid)
    with pytest.raises(ConversionError, match=r"table public\.t"):
        _tx(_assembler(FakeCatalog(), FakeLog()), rel, bad)
    batch = _tx(_assembler(FakeCatalog(), FakeLog(), "dead_letter"), rel, bad)
    assert not batch.events and batch.dead_letters[0].key == {"id": "1"}
    assert batch.commit_offsets is not None


def test_truncate_and_unknown_relation() -> None:
    asm = _assembler(FakeCatalog(), FakeLog())
    batch = _tx(asm, _relation("id"), pg.Truncate((1,), False, False))
    assert [(e.op, e.key) for e in batch.events] == [(Op.TRUNCATE, {})]
    with pytest.raises(pg.ProtocolError):
        _tx(asm, pg.Insert(99, ("1",)))


def test_keyless_table_is_refused_unless_configured() -> None:
    info = TableInfo("public", "k", 2, "d", ())
    with pytest.raises(SourceFatal, match="no primary key"):
        check_keyable(info, None)
    check_keyable(info, ["code"])
    check_keyable(TableInfo("public", "k", 2, "f", ()), None)


def test_source_sequence_resumes_the_stored_last_commit() -> None:
    fresh = _assembler(FakeCatalog(), FakeLog())
    first = _tx(fresh, _relation("id", "v"), pg.Insert(1, ("1", "a")))
    assert [e.source.order for e in first.events] == ['[null,"102"]']
    # a restart: the stored lsn_commit is the first LSN of source.sequence, as Debezium's is
    restarted = _assembler(FakeCatalog(), FakeLog(), last_commit=150)
    later = _tx(restarted, _relation("id", "v"), pg.Insert(1, ("2", "b")), lsn=200)
    assert [e.source.order for e in later.events] == ['["150","202"]']
