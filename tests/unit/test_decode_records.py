"""decode_records, the sinks' shared decoding: with the MongoDB plugin's ``record_rows`` (what
the runtime hands a MongoDB pipeline's sinks) it gives what extended_json.rows gives for every
kind of record; without one (every other source) values are only parsed (pure, no server)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from cdc.contracts import plugins
from cdc.contracts.sink import SinkRecord, sink_offsets
from cdc.log.base import StoredRecord, TopicPartition
from cdc.runtime.factories import source_record_rows
from cdc.runtime.sink_task import decode_records, payload_of, unwrap
from connectors.mongodb import extended_json

KEY = {"_id": 5}
MONGO = {
    "before": None,
    "after": '{"_id": {"$numberLong": "5"}, "at": {"$date": 1704164645123}}',
    "source": {"connector": "mongodb", "db": "shop", "collection": "items", "pos": [1, 0]},
    "op": "c",
}
POSTGRES = {
    "before": None,
    "after": {"id": 5, "name": "a"},
    "source": {"connector": "postgresql", "schema": "public", "table": "items"},
    "op": "c",
}


def wrapped(payload: Any) -> dict[str, Any]:
    return {"schema": {"type": "struct", "fields": []}, "payload": payload}


@pytest.mark.parametrize(
    "value",
    [
        MONGO,
        POSTGRES,
        wrapped(MONGO),
        wrapped(POSTGRES),
        None,
        {"op": "c", "source": None},
        {"op": "c", "source": "mongodb"},
        {"payload": MONGO, "schema": {}, "extra": 1},  # not exactly a wrapper
        [1, 2],
    ],
)
def test_values_decode_as_extended_json_rows_makes_them(value: Any) -> None:
    data = None if value is None else orjson.dumps(value)
    stored = StoredRecord("shop.shop.items", 0, 3, orjson.dumps(KEY), data, 0, b"[1,0]")
    mongodb = source_record_rows(SimpleNamespace(source=SimpleNamespace(type="mongodb")))
    (record,) = decode_records([stored], rows=mongodb)
    parsed = None if value is None else unwrap(orjson.loads(orjson.dumps(value)))
    key, expected = extended_json.rows(stored.topic, dict(KEY), parsed)
    assert (record.key, record.value) == (key, expected)
    if value is MONGO:  # the row became an object: the MongoDB path ran
        assert record.value is not None and record.value["after"] == {
            "_id": 5,
            "at": {"$date": "2024-01-02T03:04:05.123Z"},
        }


@pytest.mark.parametrize("value", [MONGO, POSTGRES, wrapped(POSTGRES), None])
def test_without_a_source_decoder_values_are_only_parsed(value: Any) -> None:
    data = None if value is None else orjson.dumps(value)
    stored = StoredRecord("shop.public.items", 0, 3, orjson.dumps(KEY), data, 0, b"[1,0]")
    (record,) = decode_records([stored])
    assert record.key == KEY
    assert record.value == (None if value is None else unwrap(orjson.loads(data or b"null")))
    if value is MONGO:  # no MongoDB decoding for a pipeline whose source is not MongoDB
        assert record.value is not None and isinstance(record.value["after"], str)


def test_only_the_mongodb_plugin_brings_a_decoder() -> None:
    found = {
        name: source_record_rows(SimpleNamespace(source=SimpleNamespace(type=name)))
        for name in ("mongodb", "postgres", "generator")
    }
    assert found["mongodb"] is extended_json.rows
    assert found["mongodb"] is plugins.load(plugins.SOURCE_GROUP, "mongodb").record_rows
    assert found["postgres"] is None and found["generator"] is None


ODD = [
    {"sku": 1},  # begins as a wrapper does ({"s...): parsed whole
    {"payload": {"id": 1}, "schema": {}},  # a wrapper, in the other key order
    {"schema": {"type": "struct"}, "payload": {"payload": 1, "schema": 2}},  # unwrapped once
    {"schema": {"type": "struct"}, "payload": 5, "extra": 1},  # not exactly a wrapper
    1,
    [],
    "s",
    None,  # JSON null, not a tombstone
]


@pytest.mark.parametrize("data", [orjson.dumps(v) for v in ODD] + [b'{"schema":{}, "payload":1}'])
def test_keys_and_values_decode_as_payload_of_parses_them(data: bytes) -> None:
    (record,) = decode_records([StoredRecord("p.s.t", 1, 9, data, data, 0, None)])
    assert record.key == payload_of(data)
    assert record.value == payload_of(data)


def test_decoded_records_are_the_sink_records_the_constructor_builds() -> None:
    """Records are built without the frozen dataclass's __init__ (cdc.runtime.record_decoding
    ._Unfrozen): they are SinkRecords like any other, and as frozen."""
    era: Any = object()  # the era the log's encodings give both records
    stored = [
        StoredRecord("p.s.t", 2, 7, b'{"id":1}', orjson.dumps(POSTGRES), 0, b"[1,0]"),
        StoredRecord("p.s.t", 2, 8, b'{"id":1}', None, 0, None),  # a tombstone
    ]
    eras = SimpleNamespace(of=lambda records: [era] * len(records))
    decoded = decode_records(stored, eras)  # type: ignore[arg-type]
    built = [
        SinkRecord("p.s.t", 2, 7, {"id": 1}, POSTGRES, era, b"[1,0]"),
        SinkRecord("p.s.t", 2, 8, {"id": 1}, None, era, None),
    ]
    assert decoded == built
    assert [type(r) for r in decoded] == [SinkRecord, SinkRecord]
    assert [repr(r) for r in decoded] == [repr(r) for r in built]
    first = decoded[0]
    assert (first.tp, first.position) == (TopicPartition("p.s.t", 2), built[0].position)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.value = None  # type: ignore[misc]
    assert dataclasses.replace(first, value=None) == SinkRecord(
        "p.s.t", 2, 7, {"id": 1}, None, era, b"[1,0]"
    )
    assert sink_offsets(decoded) == {TopicPartition("p.s.t", 2): 9}
