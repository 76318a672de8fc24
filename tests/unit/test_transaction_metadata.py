"""provide.transaction.metadata: transaction blocks and BEGIN/END records (Debezium's shape)."""

from __future__ import annotations

import orjson

from cdc.envelope_options import EnvelopeOptions
from cdc.events import ChangeEvent, Op, SourceInfo
from cdc.runtime.transactions import TransactionMetadata


def _event(
    table: str, tx: int, lsn: int, seq: int, op: Op = Op.CREATE, snapshot: str = "false"
) -> ChangeEvent:
    src = SourceInfo("postgresql", "db", "public", table, 1000, lsn, seq, snapshot, tx)
    return ChangeEvent(op, {"id": seq}, None, {"id": seq}, src)


def _options(**kw: object) -> EnvelopeOptions:
    return EnvelopeOptions.model_validate({"provide.transaction.metadata": True, **kw})


def test_blocks_and_begin_end_records_in_order() -> None:
    meta = TransactionMetadata("p", _options())
    events = [_event("a", 7, 100, 0), _event("b", 7, 100, 1), _event("a", 7, 100, 2)]
    records = meta.records(events, 5, ends=False)  # the transaction goes on in the next batch
    records += meta.records([_event("a", 8, 200, 0)], 5, ends=True)
    topics = [r.topic for r in records]
    assert topics == [
        "p.transaction",
        "p.public.a",
        "p.public.b",
        "p.public.a",
        "p.transaction",
        "p.transaction",
        "p.public.a",
        "p.transaction",
    ]
    begin, end = orjson.loads(records[0].value or b""), orjson.loads(records[4].value or b"")
    assert orjson.loads(records[0].key or b"") == {"id": "7:100"}
    assert begin == {
        "status": "BEGIN",
        "id": "7:100",
        "ts_ms": 1000,
        "event_count": None,
        "data_collections": None,
    }
    assert end == {
        "status": "END",
        "id": "7:100",
        "ts_ms": 1000,
        "event_count": 3,
        "data_collections": [
            {"data_collection": "public.a", "event_count": 2},
            {"data_collection": "public.b", "event_count": 1},
        ],
    }
    third = orjson.loads(records[3].value or b"")
    assert list(third)[:4] == ["before", "after", "source", "transaction"]
    assert third["transaction"] == {"id": "7:100", "total_order": 3, "data_collection_order": 2}
    assert orjson.loads(records[7].value or b"")["event_count"] == 1


def test_snapshot_rows_and_skipped_operations_take_no_part() -> None:
    meta = TransactionMetadata("p", _options(**{"skipped.operations": "t"}))
    events = [_event("a", 5, 90, 0, Op.READ, snapshot="true"), _event("a", 7, 100, 0, Op.TRUNCATE)]
    records = meta.records(events, 5, ends=True)
    assert [r.topic for r in records] == ["p.public.a"]
    assert orjson.loads(records[0].value or b"")["transaction"] is None
