"""decode_records, the sinks' shared decoding: with the MongoDB plugin's ``record_rows`` (what
the runtime hands a MongoDB pipeline's sinks) it gives what extended_json.rows gives for every
kind of record; without one (every other source) values are only parsed (pure, no server)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from cdc.contracts import plugins
from cdc.log.base import StoredRecord
from cdc.runtime.factories import source_record_rows
from cdc.runtime.sink_task import decode_records, unwrap
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
