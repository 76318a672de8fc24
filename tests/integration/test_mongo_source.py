"""The MongoDB source against a real server (mongo-java-server, or ``CDC_TEST_MONGO_URI``):
values of every BSON type through insert, update, replace and delete; snapshot and stream
meeting; resume without loss; bad input. See ``mongo_kit`` for where the fake server differs."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from bson import Binary, Decimal128, Int64, ObjectId, json_util
from structlog.testing import capture_logs

from cdc.contracts.errors import ConfigError, SourceFatal, SourceUnavailable
from cdc.contracts.events import Op
from connectors.mongodb import MongoSourcePlugin
from tests.integration.mongo_kit import (
    database,
    harness,
    into_next_second,
    is_real,
    private_server,
    scope,
)

pytestmark = pytest.mark.timeout(120)


def relaxed(doc: Any) -> Any:
    """The reference: what ``bson.json_util`` makes of a document in relaxed mode."""
    return orjson.loads(json_util.dumps(doc, json_options=json_util.RELAXED_JSON_OPTIONS))


def every_type(n: int) -> dict[str, Any]:
    return {
        "_id": ObjectId(),
        "int32": n,
        "int64": Int64(2**40 + n),
        "double": 1.25 + n,
        "text": f"héllo {n}",
        "flag": n % 2 == 0,
        "nothing": None,
        "when": dt.datetime(2024, 2, 29, 12, 30, 15, 123000, tzinfo=dt.UTC),
        "old": dt.datetime(1960, 1, 1, tzinfo=dt.UTC),
        "price": Decimal128("12345678901234567890.123456789"),
        "blob": Binary(b"\x00\x01\xfe\xff", 0),
        "uuid": Binary(uuid.UUID(int=n).bytes, 4),
        "nested": {"a": {"b": [1, {"c": Decimal128("0.1")}, "x"]}, "empty": {}},
        "list": [1, "two", 3.5, None, [4, 5]],
    }


def test_every_bson_type_through_insert_update_replace_delete(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("items")
        table = f"{db.name}.items"
        with harness(mongo_server.uri, tmp_path, [table], stream_scope=scope(mongo_server)) as h:
            h.open()
            doc = every_type(1)
            # One step per change: updateLookup reads the document when the change is read,
            # so an update read after the delete has no document (and is left out).
            db.items.insert_one(doc)
            h.collect(1)
            db.items.update_one({"_id": doc["_id"]}, {"$set": {"nested.a.z": Int64(7)}})
            h.collect(2)
            db.items.replace_one({"_id": doc["_id"]}, every_type(2) | {"_id": doc["_id"]})
            replaced = db.items.find_one({"_id": doc["_id"]})
            h.collect(3)
            db.items.delete_one({"_id": doc["_id"]})
            events = h.collect(4)
    key = {"_id": {"$oid": str(doc["_id"])}}
    assert [e.op for e in events] == [Op.CREATE, Op.UPDATE, Op.UPDATE, Op.DELETE]
    assert all(e.key == key for e in events)
    assert events[0].after == relaxed(doc)
    assert events[0].after["price"] == {"$numberDecimal": "12345678901234567890.123456789"}
    assert events[0].after["when"] == {"$date": "2024-02-29T12:30:15.123Z"}
    assert events[0].after["blob"] == {"$binary": {"base64": "AAH+/w==", "subType": "00"}}
    assert events[0].after["int64"] == 2**40 + 1
    assert events[1].after is not None and events[1].after["nested"]["a"]["z"] == 7
    assert events[2].after == relaxed(replaced)
    # Debezium writes no before for a delete without pre-images; the key names the document.
    assert events[3].before is None and events[3].after is None and events[3].key == key
    positions = [(e.source.position, e.source.sequence) for e in events]
    assert positions == sorted(positions) and len(set(positions)) == 4
    schema = h.schemas[-1]
    assert schema.key_columns == ["_id"]
    assert {c.name for c in schema.columns} >= set(every_type(0))


def test_nested_documents_and_schema_growth(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("docs")
        table = f"{db.name}.docs"
        with harness(mongo_server.uri, tmp_path, [table], stream_scope=scope(mongo_server)) as h:
            h.open()
            db.docs.insert_one({"_id": "a", "deep": {"l1": {"l2": {"l3": [{"l4": True}]}}}})
            db.docs.insert_one({"_id": {"compound": 1, "key": "b"}, "extra": [[1], [2]]})
            events = h.collect(2)
    assert events[0].after == {"_id": "a", "deep": {"l1": {"l2": {"l3": [{"l4": True}]}}}}
    assert events[1].key == {"_id": {"compound": 1, "key": "b"}}
    names = [c.name for c in h.schemas[-1].columns]
    assert names == ["_id", "deep", "extra"]  # columns only grow, in first-seen order
    assert all(c.type == "" for c in h.schemas[-1].columns)


def test_snapshot_then_stream_meet(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.rows.insert_many([{"_id": i, "v": i} for i in range(1000)])
        table = f"{db.name}.rows"
        options = {"stream_scope": scope(mongo_server), "snapshot_range_docs": 90}
        with harness(mongo_server.uri, tmp_path, [table], snapshot="initial", **options) as h:
            h.open()
            assert h.stored() == {}  # nothing is stored before the first batch commits
            h.step(timeout_s=2)
            progress = h.stored()["snapshot"]["collections"][table]
            assert len(progress["ranges"]) == 12 and progress["rows"] > 0
            h.collect(1000)
            db.rows.update_one({"_id": 5}, {"$set": {"v": -5}})
            db.rows.insert_one({"_id": 1000, "v": 1000})
            events = h.run_until(lambda: bool(h.events) and h.events[-1].key == {"_id": 1000})
            stored = h.stored()
    snapshot = [e for e in events if e.op is Op.READ]
    assert sorted(e.key["_id"] for e in snapshot) == list(range(1000))
    streamed = events[1000:]
    assert [e.op for e in streamed[-2:]] == [Op.UPDATE, Op.CREATE]
    # mongo-java-server gives the start point to the second (increment 0), so the inserts of
    # that second are streamed again: harmless, as they are newer than the snapshot rows and
    # describe the same documents. A real server's resume token replays nothing.
    assert all(e.op is Op.CREATE and e.key["_id"] < 1000 for e in streamed[:-2])
    assert all(e.source.position > snapshot[0].source.position for e in streamed)
    assert stored["last_snapshot"]["rows"] == {table: 1000}
    assert "snapshot" not in stored


def test_restart_resumes_after_the_stored_token(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("c")
        table = f"{db.name}.c"
        with harness(mongo_server.uri, tmp_path, [table], stream_scope=scope(mongo_server)) as h:
            h.open()
            db.c.insert_many([{"_id": i} for i in range(10)])
            h.collect(10)
            h.close()
            db.c.insert_many([{"_id": i} for i in range(10, 25)])  # while the source is down
            h.events.clear()
            h.open()
            db.c.insert_one({"_id": 25})
            events = h.collect(16)
    assert [e.key["_id"] for e in events] == list(range(10, 26))  # no gap, no replay


def _spoil_position(h: Any, server: Any, only: str | None = None) -> None:
    """Store a resume point the server cannot resume from.

    A real server keeps a bounded oplog: a cluster time of 1970 lies before it, so it answers
    286 ChangeStreamHistoryLost. mongo-java-server keeps its oplog forever and resumes from any
    well-formed point, and only refuses a token it cannot parse: that stands in for it there.
    """
    offsets = h.log.source_offsets()
    for stream, entry in offsets["mongodb"]["streams"].items():
        if only is not None and stream != only:
            continue
        if getattr(server, "is_real_mongod", False):
            entry.update(resume_token=None, cluster_time=(1 << 32) | 1)
        else:
            entry["resume_token"] = {"_data": "not-a-resume-token"}
    tx = h.log.begin()
    tx.store_offsets(offsets)
    tx.commit()


def test_history_lost_fails_with_advice(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("c")
        table = f"{db.name}.c"
        with harness(mongo_server.uri, tmp_path, [table], stream_scope=scope(mongo_server)) as h:
            h.open()
            db.c.insert_one({"_id": 1})
            h.collect(1)
            h.close()
            _spoil_position(h, mongo_server)
            with pytest.raises(SourceFatal, match="snapshot: when_needed") as failure:
                h.open()
    assert table in str(failure.value) and "cannot resume" in str(failure.value)


def test_history_lost_when_needed_snapshots_again(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.c.insert_many([{"_id": i} for i in range(5)])
        table = f"{db.name}.c"
        opts = {"stream_scope": scope(mongo_server)}
        with harness(mongo_server.uri, tmp_path, [table], snapshot="when_needed", **opts) as h:
            h.open()
            h.collect(5)
            h.close()
            _spoil_position(h, mongo_server)
            db.c.delete_one({"_id": 0})
            db.c.insert_one({"_id": 9})
            h.events.clear()
            h.open()
            events = h.collect(5)
            db.c.insert_one({"_id": 10})
            # mongo-java-server may stream the delete and insert above again first (its start
            # point is to the second): harmless, they are newer than the rows.
            h.run_until(lambda: h.events[-1].key == {"_id": 10})
            stored = h.stored()
            report = MongoSourcePlugin.status(h.config, "mgt", h.log.source_offsets())
    assert sorted(e.key["_id"] for e in events[:5]) == [1, 2, 3, 4, 9]
    assert all(e.op is Op.READ for e in events[:5]) and h.events[-1].key == {"_id": 10}
    note = stored["history_lost"][-1]
    assert note["tables"] == [table] and note["action"] == "re-snapshot"
    assert report["history_lost"][-1]["tables"] == [table]
    assert stored["last_snapshot"]["reason"].startswith("history lost")


def test_history_lost_by_the_signal_stream_alone_restarts_it_without_a_snapshot(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("c")
        signals = f"{db.name}.cdc_signals"
        db.cdc_signals.insert_one({"type": "snapshot", "table": f"{db.name}.gone"})
        table = f"{db.name}.c"
        # One stream per collection, on any server, so that only the signals' stream is lost.
        opts = {"stream_scope": "collection", "signal_collection": signals}
        with harness(mongo_server.uri, tmp_path, [table], snapshot="when_needed", **opts) as h:
            h.open()
            db.c.insert_one({"_id": 1})
            h.collect(1)
            h.run_until(lambda: set(h.stored().get("streams", {})) == {table, signals})
            h.close()
            initial = h.stored()["last_snapshot"]  # when_needed's first start: an empty c
            _spoil_position(h, mongo_server, only=signals)
            h.events.clear()  # the first start's snapshot may have read _id 1 as a row
            h.open()
            db.c.insert_one({"_id": 2})
            h.run_until(lambda: any(e.key == {"_id": 2} for e in h.events))
            stored = h.stored()
    assert not any(e.op is Op.READ for e in h.events)
    assert "snapshot" not in stored and stored["last_snapshot"] == initial
    note = stored["history_lost"][-1]
    assert note["tables"] == [signals] and note["action"] == "restart from now"


def test_unreachable_server_is_retried_and_the_password_hidden(tmp_path: Path) -> None:
    from tests.services.ports import free_port

    uri = f"mongodb://cdc:s3cret@127.0.0.1:{free_port()}/?authSource=admin"
    with (
        harness(uri, tmp_path, ["db.c"], server_selection_timeout_ms=300) as h,
        pytest.raises(SourceUnavailable) as failure,
    ):
        h.open()
    assert "s3cret" not in str(failure.value) and "cdc:***@127.0.0.1" in str(failure.value)


def test_missing_collection_is_named(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("present")
        tables = [f"{db.name}.present", f"{db.name}.absent"]
        missing = rf"{db.name}\.absent \(source\.tables\[1\]\)"
        with (
            harness(mongo_server.uri, tmp_path, tables) as h,
            pytest.raises(SourceFatal, match=missing),
        ):
            h.open()


def test_read_rows_matches_the_after_images(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        docs = [every_type(n) for n in range(3)]
        db.v.insert_many(docs)
        table = f"{db.name}.v"
        opts = {"stream_scope": scope(mongo_server)}
        with harness(mongo_server.uri, tmp_path, [table], snapshot="initial", **opts) as h:
            h.open()
            events = h.collect(3)
            rows = list(MongoSourcePlugin.read_rows(h.config, db.name, "v"))
    images = [dict(e.after) for e in events if e.after is not None]  # the rows' values
    assert sorted(orjson.dumps(r) for _, r in rows) == sorted(orjson.dumps(a) for a in images)
    assert [k for k, _ in rows] == [{"_id": {"$oid": str(d["_id"])}} for d in docs]


def test_snapshot_of_mixed_id_types_reads_each_document_once(
    mongo_server: Any, tmp_path: Path
) -> None:
    ids: list[Any] = [None, -1, 2.5, Int64(3), "a", "b", {"k": 1}, ObjectId(), ObjectId(), True]
    ids.append(dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    with database(mongo_server.uri) as db:
        db.mixed.insert_many([{"_id": i, "n": n} for n, i in enumerate(ids)])
        table = f"{db.name}.mixed"
        opts = {"stream_scope": scope(mongo_server), "snapshot_range_docs": 2}
        with harness(mongo_server.uri, tmp_path, [table], snapshot="initial", **opts) as h:
            h.open()
            h.run_until(lambda: "last_snapshot" in h.stored())
    snapshot = [e for e in h.events if e.op is Op.READ]
    assert sorted(e.after["n"] for e in snapshot if e.after) == list(range(len(ids)))


def test_an_interrupted_snapshot_resumes_after_the_last_committed_id(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.s.insert_many([{"_id": i} for i in range(1000)])
        table = f"{db.name}.s"
        opts = {
            "stream_scope": scope(mongo_server),
            "snapshot_range_docs": 200,
            "snapshot_batch": 50,
            "snapshot_workers": 2,
        }
        with harness(mongo_server.uri, tmp_path, [table], snapshot="initial", **opts) as h:
            h.open()
            h.run_until(lambda: len(h.events) >= 300)
            first = len(h.events)
            progress = MongoSourcePlugin.status(h.config, "mgt", h.log.source_offsets())
            h.close()  # as after a crash: only committed batches count
            h.open()
            h.run_until(lambda: "last_snapshot" in h.stored())
            stored = h.stored()
    keys = [e.key["_id"] for e in h.events if e.op is Op.READ]
    assert sorted(keys) == list(range(1000))  # each document exactly once over both runs
    assert first >= 300 and progress["snapshot"][table]["rows"] == first
    assert progress["snapshot"][table]["ranges"] == 5
    assert stored["last_snapshot"]["rows"] == {table: 1000}  # counted over both runs


def test_snapshot_modes_never_and_always(mongo_server: Any, tmp_path: Path) -> None:
    with database(mongo_server.uri) as db:
        db.m.insert_many([{"_id": i} for i in range(20)])
        table = f"{db.name}.m"
        opts = {"stream_scope": scope(mongo_server)}
        with harness(mongo_server.uri, tmp_path / "n", [table], snapshot="never", **opts) as h:
            h.open()
            into_next_second()  # mongo-java-server starts streams at a whole second
            db.m.insert_one({"_id": 20})
            h.run_until(lambda: any(e.key == {"_id": 20} for e in h.events))
            assert not any(e.op is Op.READ for e in h.events)
        with harness(mongo_server.uri, tmp_path / "a", [table], snapshot="always", **opts) as h:
            h.open()
            h.collect(21)
            h.close()
            h.events.clear()
            h.open()  # a stored position, and still a snapshot
            h.collect(21)
            assert sorted(e.key["_id"] for e in h.events if e.op is Op.READ) == list(range(21))


def test_a_server_gone_mid_stream_is_retriable(mongo_server: Any, tmp_path: Path) -> None:
    if is_real(mongo_server):
        pytest.skip("stops the server: only the test's own mongo-java-server can be stopped")
    with private_server(mongo_server) as server, database(server.uri) as db:
        db.create_collection("c")
        table = f"{db.name}.c"
        opts = {"stream_scope": "collection", "server_selection_timeout_ms": 500}
        with harness(server.uri, tmp_path, [table], **opts) as h:
            h.open()
            db.c.insert_one({"_id": 1})
            h.collect(1)
            server.stop()
            with pytest.raises(SourceUnavailable, match="unreachable"):
                h.run_until(lambda: False, timeout_s=20)
            server.start()  # in memory: it comes back empty, for the teardown to drop


def test_a_requested_snapshot_rereads_a_collection_between_streamed_changes(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.c.insert_many([{"_id": i, "v": i} for i in range(100)])
        table = f"{db.name}.c"
        opts = {
            "stream_scope": scope(mongo_server),
            "signal_collection": f"{db.name}.cdc_signals",
            "snapshot_range_docs": 30,
        }
        with harness(mongo_server.uri, tmp_path, [table], **opts) as h:
            h.open()
            into_next_second()  # mongo-java-server starts streams at a whole second
            db.c.update_one({"_id": 1}, {"$set": {"v": -1}})
            h.collect(1)
            with pytest.raises(ConfigError, match="--where"):
                MongoSourcePlugin.request_snapshot(h.config, "mgt", table, "v > 1")
            request = MongoSourcePlugin.request_snapshot(h.config, "mgt", table, None)
            h.run_until(lambda: request["id"] in str(h.stored().get("finished_requests")))
            db.c.insert_one({"_id": 100, "v": 100})
            h.run_until(lambda: h.events[-1].key == {"_id": 100})
            offsets = h.log.source_offsets()
    rows = [e for e in h.events if e.op is Op.READ]
    assert sorted(e.key["_id"] for e in rows) == list(range(100))
    assert {e.source.position for e in rows} == {offsets["mongodb"]["last_snapshot"]["position"]}
    assert h.events[0].source.position < rows[0].source.position < h.events[-1].source.position
    assert offsets["snapshot"]["finished"] == [request["id"]]
    assert offsets["snapshot"]["tables"][table]["kind"] == "blocking"


def test_a_request_for_a_collection_not_captured_is_ignored_once(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("c")
        table = f"{db.name}.c"
        opts = {"stream_scope": scope(mongo_server), "signal_collection": f"{db.name}.cdc_signals"}
        with harness(mongo_server.uri, tmp_path, [table], **opts) as h, capture_logs() as logs:
            h.open()
            into_next_second()  # mongo-java-server starts streams at a whole second
            other = f"{db.name}.other"
            db.cdc_signals.insert_one({"type": "snapshot", "table": other, "pipeline": "mgt"})
            db.c.insert_many([{"_id": i} for i in range(5)])
            h.collect(5)
            for _ in range(5):
                h.step(0.1)
    ignored = [entry for entry in logs if entry["event"] == "signal.ignored"]
    assert [entry["table"] for entry in ignored] == [other]
    assert [e.key["_id"] for e in h.events] == list(range(5))
    assert not any(e.op is Op.READ for e in h.events)


def test_the_first_start_point_is_stored_before_any_change(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.create_collection("c")
        table = f"{db.name}.c"
        with harness(mongo_server.uri, tmp_path, [table], stream_scope=scope(mongo_server)) as h:
            h.open()
            h.step()
            assert h.stored()["streams"]  # stored although nothing changed yet
            h.close()
            db.c.insert_one({"_id": "while down"})
            h.open()
            h.collect(1)
    assert h.events[0].key == {"_id": "while down"}
