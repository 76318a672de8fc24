"""provide.transaction.metadata: transaction blocks and BEGIN/END records (Debezium's shape)."""

from __future__ import annotations

import orjson

from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.envelope.options import EnvelopeOptions
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
    assert list(begin.items()) == [  # in Debezium 3.6.1's key order
        ("status", "BEGIN"),
        ("id", "7:100"),
        ("event_count", None),
        ("data_collections", None),
        ("ts_ms", 1000),
    ]
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


#: What Debezium 3.6.1 wrote for an END record under schemas.enable (its real output).
_DEBEZIUM_KEY_SCHEMA = {
    "type": "struct",
    "fields": [{"type": "string", "optional": False, "field": "id"}],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataKey",
    "version": 1,
}
_DEBEZIUM_VALUE_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "status"},
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": True, "field": "event_count"},
        {
            "type": "array",
            "items": {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "data_collection"},
                    {"type": "int64", "optional": False, "field": "event_count"},
                ],
                "optional": True,
                "name": "event.collection",
                "version": 1,
            },
            "optional": True,
            "field": "data_collections",
        },
        {"type": "int64", "optional": False, "field": "ts_ms"},
    ],
    "optional": False,
    "name": "io.debezium.connector.common.TransactionMetadataValue",
    "version": 1,
}


def test_schemas_enable_wraps_them_as_debezium() -> None:
    meta = TransactionMetadata("p", _options(**{"schemas.enable": True}))
    records = meta.records([_event("a", 7, 100, 0)], 5, ends=True)
    end = records[-1]
    key, value = orjson.loads(end.key or b""), orjson.loads(end.value or b"")
    assert key == {"schema": _DEBEZIUM_KEY_SCHEMA, "payload": {"id": "7:100"}}
    assert value["schema"] == _DEBEZIUM_VALUE_SCHEMA
    assert orjson.dumps(value["schema"]) == orjson.dumps(_DEBEZIUM_VALUE_SCHEMA)  # key order too
    assert value["payload"]["status"] == "END" and value["payload"]["event_count"] == 1
    change = orjson.loads(records[1].value or b"")
    assert change["payload"]["transaction"]["total_order"] == 1
