"""A snapshot of 50,000 documents while other clients write: the final per-key state of the
topic (the last record of each key, tombstones dropping it) must equal the collection."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.contracts.events import topic_name
from connectors.mongodb import MongoSourcePlugin, extended_json
from tests.integration.mongo_kit import (
    PIPELINE,
    database,
    harness,
    into_next_second,
    private_server,
    scope,
)

DOCS = 50_000
pytestmark = pytest.mark.timeout(240)


def _writer(coll: Any, stop: threading.Event, counts: dict[str, int]) -> None:
    rng = random.Random(7)
    next_id = DOCS
    while not stop.is_set():
        roll = rng.random()
        if roll < 0.6:
            coll.update_one({"_id": rng.randrange(next_id)}, {"$set": {"v": rng.random()}})
            counts["updates"] += 1
        elif roll < 0.8:
            coll.delete_one({"_id": rng.randrange(next_id)})
            counts["deletes"] += 1
        else:
            coll.insert_one({"_id": next_id, "v": 0.0, "fresh": True})
            next_id += 1
            counts["inserts"] += 1


def _topic_state(log: Any, topic: str) -> dict[bytes, Any]:
    state: dict[bytes, Any] = {}
    for partition in log.end_offsets(topic):
        offset = 0
        while records := log.read(topic, partition, offset, 5000):
            for record in records:
                # Read as a sink reads it: Debezium's key and text rows back into objects.
                value = None if record.value is None else orjson.loads(record.value)
                key, value = extended_json.rows(topic, orjson.loads(record.key), value)
                if value is None:
                    state.pop(orjson.dumps(key), None)
                else:
                    state[orjson.dumps(key)] = value["after"]
            offset = records[-1].offset + 1
    return state


@pytest.fixture
def own_server(mongo_server: Any) -> Iterator[Any]:
    with private_server(mongo_server) as server:
        yield server


def test_snapshot_under_concurrent_writes_equals_the_collection(
    own_server: Any, tmp_path: Path
) -> None:
    mongo_server = own_server
    with database(mongo_server.uri) as db:
        db.big.insert_many(
            [{"_id": i, "v": float(i), "name": f"doc {i}", "tags": ["a", i]} for i in range(DOCS)]
        )
        # mongo-java-server starts a stream at a whole second and repairs each event with a scan
        # of its oplog: without this pause the bulk load's last second is streamed again, slowly.
        into_next_second()
        table = f"{db.name}.big"
        options = {
            "stream_scope": scope(mongo_server),
            "snapshot_range_docs": 5_000,
            "snapshot_workers": 4,
        }
        with harness(mongo_server.uri, tmp_path, [table], snapshot="initial", **options) as h:
            stop, counts = threading.Event(), {"updates": 0, "deletes": 0, "inserts": 0}
            writer = threading.Thread(target=_writer, args=(db.big, stop, counts))
            started = time.monotonic()
            h.open()
            writer.start()
            try:
                h.run_until(lambda: "last_snapshot" in h.stored(), 180)
            finally:
                stop.set()
                writer.join()
            took = time.monotonic() - started
            db.big.insert_one({"_id": "sentinel"})
            h.run_until(lambda: bool(h.events) and h.events[-1].key == {"_id": "sentinel"}, 60)
            topic = _topic_state(h.log, topic_name(PIPELINE, db.name, "big"))
            rows = MongoSourcePlugin.read_rows(h.config, db.name, "big")
            collection = {orjson.dumps(key): row for key, row in rows}
    print(f"snapshot of {DOCS} documents in {took:.1f}s ({DOCS / took:,.0f} docs/s), {counts}")
    assert counts["updates"] > 0 and counts["deletes"] > 0 and counts["inserts"] > 0
    assert topic.keys() == collection.keys()
    assert topic == collection
