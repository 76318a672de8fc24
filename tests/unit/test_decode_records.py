"""decode_records, the sinks' shared decoding: its shortcut for non-MongoDB values gives what
extended_json.rows gives for every kind of record (pure, no server)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from cdc.log.base import StoredRecord
from cdc.records import extended_json
from cdc.runtime.sink_task import decode_records, unwrap

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
    (record,) = decode_records([stored])
    parsed = None if value is None else unwrap(orjson.loads(orjson.dumps(value)))
    key, expected = extended_json.rows(stored.topic, dict(KEY), parsed)
    assert (record.key, record.value) == (key, expected)
    if value is MONGO:  # the row became an object: the MongoDB path ran
        assert record.value is not None and record.value["after"] == {
            "_id": 5,
            "at": {"$date": "2024-01-02T03:04:05.123Z"},
        }
