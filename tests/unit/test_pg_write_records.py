"""The assembler writing each change as its record (``SourceContext.write_records``) writes the
records the event path gives the runtime, byte for byte but the envelope's processing time.

Both run the captured session of ``tests/unit/data/pgoutput/v1.json`` (inserts, updates,
deletes, truncates, messages, nine relations; PostgreSQL 15) through the same assembler code:
one hands its events to :func:`batch_records` as the source task does, after the task's filter
of each table's ``ops``; the other writes records itself. No server: the messages are real.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog

from cdc.contracts.events import Op
from cdc.contracts.source import SourceBatch
from cdc.envelope.encode import batch_records, encode_key, payload
from cdc.envelope.options import EnvelopeOptions
from cdc.log.base import Record
from cdc.transforms.filters import TableEntry
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.assembler import Assembler
from connectors.postgres.assembly.toast import ToastFiller
from connectors.postgres.catalog import TableInfo
from connectors.postgres.lsn import str_to_lsn
from connectors.postgres.pgoutput import Relation, decode
from connectors.postgres.publication.filters import TableFilter
from tests.unit.test_pg_stream import TOPIC, FakeCatalog, FakeLog, U, _relation, _tx

FIXTURE = Path(__file__).parent / "data" / "pgoutput" / "v1.json"
MESSAGES = [
    (str_to_lsn(at), bytes.fromhex(h)) for at, _, h in json.loads(FIXTURE.read_text())["messages"]
]
# The envelope's own processing time, the one part the two paths write at different moments.
PROCESSED = re.compile(rb'("op":"[a-z]","ts_ms":)\d+,"ts_us":\d+,"ts_ns":\d+')

ENVELOPES = {
    "plain": {},
    "schemas": {"schemas.enable": True},
    "skipped": {"skipped.operations": "u,t"},
    "no tombstones": {"tombstones.on.delete": False},
}


def _tables() -> dict[tuple[str, str], TableInfo]:
    tables = {}
    for _, data in MESSAGES:
        message = decode(data)
        if isinstance(message, Relation):
            keys = tuple(c.name for c in message.columns if c.is_key)
            pk = keys if message.replica_identity == "d" else ()
            name = (message.namespace, message.name)
            tables[name] = TableInfo(*name, message.oid, message.replica_identity, pk)
    return tables


def _run(write: bool, options: EnvelopeOptions, ops: list[str] | None) -> list[SourceBatch]:
    """The session's batches, one a message; every table's entry captures ``ops``."""
    tables = _tables()
    filters = {}
    if ops is not None:
        for schema, table in tables:
            entry = TableEntry.model_validate({"name": f"{schema}.{table}", "ops": ops})
            filters[entry.name] = TableFilter(entry)
    logger = structlog.get_logger()
    toast = ToastFiller(FakeLog(), logger)  # type: ignore[arg-type]
    asm = Assembler(
        "p", "db", tables, {}, FakeCatalog(), toast, "fail", logger,
        options=options, filters=filters, write_records=write,
    )  # fmt: skip
    assert asm.writes_records is write
    batches = []
    for lsn, data in MESSAGES:
        if not asm.change_from_bytes(data, lsn):
            asm.handle(decode(data), lsn)
        batches.append(asm.take())
    return batches


def _runtime_records(
    batch: SourceBatch, options: EnvelopeOptions, ops: list[str] | None
) -> list[Record]:
    """What the source task appends for an event batch (``SourceTask._append``)."""
    events = [e for e in batch.events if ops is None or e.op.value in ops]
    return batch_records(events, "p", 1_700_000_000_000, options)


def _unstamped(records: list[Record]) -> list[tuple[Any, ...]]:
    return [
        (r.topic, r.key, None if r.value is None else PROCESSED.sub(rb"\1_", r.value), r.pos)
        for r in records
    ]


@pytest.mark.parametrize("ops", [None, ["c", "d", "r"]], ids=["all ops", "ops c d"])
@pytest.mark.parametrize("envelope", sorted(ENVELOPES))
def test_written_records_are_the_event_paths_records(envelope: str, ops: list[str] | None) -> None:
    options = EnvelopeOptions.model_validate(ENVELOPES[envelope])
    by_events, written = _run(False, options, ops), _run(True, options, ops)
    assert all(not b.records for b in by_events) and all(not b.events for b in written)
    expected = [r for b in by_events for r in _runtime_records(b, options, ops)]
    got = [r for b in written for r in b.records]
    assert len(got) >= 200
    assert _unstamped(got) == _unstamped(expected)
    for events_batch, records_batch in zip(by_events, written, strict=True):
        kept = [e for e in events_batch.events if ops is None or e.op.value in ops]
        kept = [e for e in kept if e.op not in options.skipped]
        want_ops = []
        for e in kept:
            want_ops.append(e.op.value)
            if e.op is Op.DELETE and options.tombstones_on_delete:
                want_ops.append("")
        assert list(records_batch.record_ops or ()) == want_ops
        assert records_batch.commit_offsets == events_batch.commit_offsets
        assert records_batch.schemas == events_batch.schemas
        if kept:
            assert records_batch.ts_ms == kept[-1].source.ts_ms


def test_written_records_carry_when_they_were_processed() -> None:
    options = EnvelopeOptions.model_validate({})
    [record, *_] = [r for b in _run(True, options, None) for r in b.records if r.value]
    stamp = PROCESSED.search(record.value or b"")
    assert stamp is not None
    assert b'"ts_ms":1' in stamp.group(0)  # the wall clock when written: a 13-digit ms number


def _writing(catalog: FakeCatalog, log: FakeLog) -> Assembler:
    """test_pg_stream's one-table assembler, writing records."""
    info = TableInfo("public", "t", 1, "d", ("id",))
    logger = structlog.get_logger()
    toast = ToastFiller(log, logger)  # type: ignore[arg-type]
    return Assembler(
        "p", "db", {("public", "t"): info}, {}, catalog, toast, "fail", logger, write_records=True
    )


def _after(record: Record) -> Any:
    return payload(orjson.loads(record.value or b"null"))["after"]


def test_an_unchanged_toast_value_is_filled_from_the_batchs_record_then_the_log() -> None:
    catalog, log = FakeCatalog(), FakeLog()
    asm = _writing(catalog, log)
    rel = _relation("id", "v", "big")
    log.values[(TOPIC, encode_key({"id": 1}))] = orjson.dumps({"after": {"big": "from-log"}})
    log.values[(TOPIC, encode_key({"id": 3}))] = orjson.dumps({"after": {"big": "stale"}})
    catalog.rows[("2",)] = ("from-table",)
    batch = _tx(
        asm,
        rel,
        pg.Update(1, None, None, ("1", "a", U)),  # previous image in the log
        pg.Update(1, None, None, ("1", "b", U)),  # the record written just before
        pg.Update(1, None, None, ("2", "c", U)),  # nothing known: read the row
        pg.Insert(1, ("3", "d", "fresh")),
        pg.Update(1, None, None, ("3", "e", U)),  # the batch's record, not the log's
    )
    assert not batch.events and batch.record_ops == ["u", "u", "u", "c", "u"]
    bigs = [_after(r)["big"] for r in batch.records]
    assert bigs == ["from-log", "from-log", "from-table", "fresh", "fresh"]
    assert catalog.reads == [["big"]]


def test_a_delete_in_the_batch_leaves_nothing_to_fill_from() -> None:
    catalog, log = FakeCatalog(), FakeLog()
    asm = _writing(catalog, log)
    log.values[(TOPIC, encode_key({"id": 1}))] = orjson.dumps({"after": {"big": "from-log"}})
    batch = _tx(
        asm,
        _relation("id", "v", "big"),
        pg.Delete(1, ("1", None, None), "K"),
        pg.Update(1, None, None, ("1", "a", U)),  # found deleted in the batch: not the log's
    )
    assert batch.record_ops == ["d", "", "u"]
    assert _after(batch.records[-1])["big"] is None
    assert catalog.reads == [["big"]]  # the row is read, as for a key the log lacks


def test_a_shape_change_cuts_the_records_before_the_new_schema() -> None:
    asm = _writing(FakeCatalog(), FakeLog())
    asm.handle(pg.Begin(100, 0, 7), 0)
    asm.handle(_relation("id", "v"), 0)
    asm.handle(pg.Insert(1, ("1", "a")), 101)
    asm.handle(_relation("id", "v", "w"), 0)
    assert asm.cut
    first = asm.take()
    assert first.commit_offsets is None and len(first.records) == 1 and len(first.schemas) == 1
    asm.handle(pg.Insert(1, ("2", "b", "c")), 102)
    asm.handle(pg.Commit(0, 100, 150, 0), 0)
    second = asm.take()
    assert [c.name for c in second.schemas[0].columns] == ["id", "v", "w"]
    assert _after(second.records[0]) == {"id": 2, "v": "b", "w": "c"}
    assert second.ts_ms == first.ts_ms is not None
