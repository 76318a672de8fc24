"""``schemas.enable: true`` through the real MongoDB source (mongo-java-server, or
``CDC_TEST_MONGO_URI``): snapshot rows and streamed changes carry the Connect schema Debezium's
MongoDB connector wrote in ``tests/debezium_mongo/expected/schemas.jsonl`` (renamed for our
topic), and the key a ``<topic>.Key`` schema of its ``_id``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest
from bson import ObjectId

from cdc.contracts.events import Op, topic_name
from cdc.envelope import encode as envelope
from cdc.envelope.options import EnvelopeOptions
from tests.integration.mongo_kit import PIPELINE, database, harness, scope

pytestmark = pytest.mark.timeout(120)

CAPTURED = Path(__file__).parents[1] / "debezium_mongo" / "expected" / "schemas.jsonl"
SCHEMAS = EnvelopeOptions.model_validate({"schemas.enable": True})


def debeziums_schema(topic: str) -> Any:
    """The value schema Debezium wrote, for ``topic``."""
    first = CAPTURED.read_text().splitlines()[0]
    return orjson.loads(first.replace("dbz.shop.items.", f"{topic}."))["value"]["schema"]


def test_snapshot_and_stream_carry_debeziums_schema(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.items.insert_one({"_id": 1, "v": 1})
        table = f"{db.name}.items"
        opts = {"stream_scope": scope(mongo_server)}
        with harness(mongo_server.uri, tmp_path, [table], snapshot="initial", **opts) as h:
            h.context = dataclasses.replace(h.context, envelope=SCHEMAS)
            h.open()
            h.collect(1)
            oid = ObjectId()
            db.items.insert_one({"_id": oid, "v": 2})
            db.items.update_one({"_id": 1}, {"$set": {"v": 3}})
            db.items.delete_one({"_id": oid})
            events = h.run_until(lambda: bool(h.events) and h.events[-1].op is Op.DELETE)
    topic = topic_name(PIPELINE, db.name, "items")
    expected = debeziums_schema(topic)
    assert [e.op for e in events][:1] == [Op.READ] and events[-1].op is Op.DELETE
    values = set()
    for event in events:
        assert event.connect is not None  # the source's schema, not one inferred from values
        for record in envelope.to_records(event, PIPELINE, 0, SCHEMAS):
            key = orjson.loads(record.key)
            assert key["schema"]["name"] == f"{topic}.Key"
            assert [f["field"] for f in key["schema"]["fields"]] == ["_id"]
            if record.value is None:
                continue
            value = orjson.loads(record.value)
            assert orjson.dumps(value["schema"]) == orjson.dumps(expected)
            values.add(event.connect.value)
    keys = [e.connect.key for e in events if e.connect is not None and e.connect.key]
    key_types = {orjson.loads(k)["fields"][0]["type"] for k in keys}
    assert key_types == {"int64", "struct"}  # an int and an ObjectId _id
    assert len(values) == 1  # one value schema for the collection, built once
