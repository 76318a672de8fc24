"""Change-stream events to change events, on documents built by hand from the examples in
MongoDB's manual ("Change Events"), and the transaction cut of the streaming loop."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
import structlog
from bson import Binary, Int64, ObjectId, Timestamp

from cdc.config.batch_bytes import BATCH_BYTES
from cdc.contracts.errors import RecordError
from cdc.contracts.events import Op
from connectors.mongodb import changes
from connectors.mongodb.fields import FieldTracker
from connectors.mongodb.plan import StreamSpec
from connectors.mongodb.streaming import StreamSet, transaction_of

OID = ObjectId("599af247bb69cd89961c986d")
CAPTURED = {("engineering", "users")}
NS = {"db": "engineering", "coll": "users"}
WALL = dt.datetime(2021, 7, 5, 9, 30, tzinfo=dt.UTC)


def event(kind: str, inc: int = 1, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "_id": {"_data": f"82{1625478000:08X}{inc:08X}2B022C0100296E5A1004"},
        "operationType": kind,
        "clusterTime": Timestamp(1625478000, inc),
        "wallTime": WALL,
        "ns": NS,
    }
    return base | fields


INSERT = event(
    "insert",
    fullDocument={"_id": OID, "userName": "alice123", "name": "Alice"},
    documentKey={"userName": "alice123", "_id": OID},  # a sharded collection's key
)
UPDATE = event(
    "update",
    2,
    documentKey={"_id": OID},
    updateDescription={
        "updatedFields": {"email": "alice@10gen.com"},
        "removedFields": ["phoneNumber"],
        "truncatedArrays": [{"field": "vacation_time", "newSize": 36}],
    },
    fullDocument={"_id": OID, "userName": "alice123", "email": "alice@10gen.com"},
)
REPLACE = event(
    "replace",
    3,
    documentKey={"_id": OID},
    fullDocument={"_id": OID, "userName": "alice", "name": "Alice B."},
)
DELETE = event("delete", 4, documentKey={"_id": OID})
KEY = {"_id": {"$oid": str(OID)}}


def one(change: dict[str, Any], sequence: int = 0) -> Any:
    outcome = changes.convert(change, CAPTURED, sequence)
    assert len(outcome.events) == 1
    return outcome.events[0]


def test_insert() -> None:
    created = one(INSERT)
    assert created.op is Op.CREATE and created.key == KEY and created.before is None
    assert created.after == {"_id": KEY["_id"], "userName": "alice123", "name": "Alice"}
    assert created.source.position == (1625478000 << 32) | 1
    assert created.source.ts_ms == int(WALL.timestamp() * 1000)
    assert created.source.schema == "engineering" and created.source.table == "users"
    ts = int(WALL.timestamp() * 1000)
    # Debezium's MongoDB source fields after db, in its order (tests/debezium_mongo/expected).
    assert list(created.source.extra.items()) == [
        ("sequence", None),
        ("ts_us", ts * 1000),
        ("ts_ns", ts * 1_000_000),
        ("collection", "users"),
        ("ord", 1),
        ("lsid", None),
        ("txnNumber", None),
        ("wallTime", ts),
    ]
    assert created.source.table_fields is False
    assert created.fields == {"updateDescription": None}


def test_update_with_update_description_takes_the_looked_up_document() -> None:
    updated = one(UPDATE, sequence=0)
    assert updated.op is Op.UPDATE and updated.before is None
    assert updated.after == {"_id": KEY["_id"], "userName": "alice123", "email": "alice@10gen.com"}
    assert updated.fields == {
        "updateDescription": {
            "removedFields": ["phoneNumber"],
            "updatedFields": '{"email": "alice@10gen.com"}',
            "truncatedArrays": [{"field": "vacation_time", "size": 36}],
        }
    }


def test_update_whose_document_is_gone_is_left_out_with_a_notice() -> None:
    outcome = changes.convert(UPDATE | {"fullDocument": None}, CAPTURED, 0)
    assert outcome.events == [] and outcome.notice is not None
    assert outcome.notice[0] == "update.skipped_document_gone"


def test_replace_and_delete() -> None:
    replaced = one(REPLACE)
    assert replaced.op is Op.UPDATE and replaced.after == {
        "_id": KEY["_id"],
        "userName": "alice",
        "name": "Alice B.",
    }
    deleted = one(DELETE)
    # Debezium writes no before without pre-images, for a delete too (the key names the row).
    assert deleted.op is Op.DELETE and deleted.after is None and deleted.before is None
    assert replaced.fields == deleted.fields == {"updateDescription": None}


def test_pre_and_post_images() -> None:
    pre = {"_id": OID, "userName": "alice123", "phoneNumber": "555"}
    updated = one(UPDATE | {"fullDocumentBeforeChange": pre})
    assert updated.before == {"_id": KEY["_id"], "userName": "alice123", "phoneNumber": "555"}
    deleted = one(DELETE | {"fullDocumentBeforeChange": pre})
    assert deleted.before == updated.before


def test_transaction_fields() -> None:
    lsid = {"id": Binary(uuid.UUID(int=9).bytes, 4), "uid": Binary(b"\x01" * 32, 0)}
    inside = one(INSERT | {"lsid": lsid, "txnNumber": Int64(12)}, sequence=3)
    assert inside.source.tx_id == 12 and inside.source.sequence == 3
    assert inside.source.extra["txnNumber"] == 12
    # The driver's STRICT compact text of the lsid document, as Debezium writes it.
    assert inside.source.extra["lsid"] == (
        '{"id": {"$binary": "AAAAAAAAAAAAAAAAAAAACQ==","$type": "04"},'
        '"uid": {"$binary": "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=","$type": "00"}}'
    )
    outside = one(INSERT, sequence=3)
    assert outside.source.extra["lsid"] is None and outside.source.extra["txnNumber"] is None


def test_drop_and_rename_of_a_captured_collection_truncate_it() -> None:
    dropped = changes.convert(event("drop", 5), CAPTURED, 0)
    assert [e.op for e in dropped.events] == [Op.TRUNCATE] and dropped.events[0].key == {}
    assert dropped.notice is not None and dropped.notice[0] == "collection.dropped"
    renamed = changes.convert(
        event("rename", 6, to={"db": "engineering", "coll": "people"}), CAPTURED, 0
    )
    assert [e.op for e in renamed.events] == [Op.TRUNCATE]
    assert renamed.notice == (
        "collection.renamed",
        {"from": "engineering.users", "to": "engineering.people", "emitted": "truncate"},
    )


def test_rename_into_a_captured_collection_advises_a_snapshot() -> None:
    into = event("rename", 7, ns={"db": "engineering", "coll": "staging"}, to=NS)
    outcome = changes.convert(into, CAPTURED, 0)
    assert outcome.events == [] and outcome.notice is not None
    assert "cdc snapshot" in outcome.notice[1]["advice"]


def test_drop_database_invalidate_and_others() -> None:
    dropped_db = changes.convert(event("dropDatabase", 8, ns={"db": "engineering"}), CAPTURED, 0)
    assert dropped_db.events == [] and dropped_db.notice == (
        "database.dropped",
        {"db": "engineering"},
    )
    invalidate = {
        "_id": {"_data": "82AA"},
        "operationType": "invalidate",
        "clusterTime": Timestamp(1, 1),
    }
    outcome = changes.convert(invalidate, CAPTURED, 0)
    assert outcome.control == "invalidate" and outcome.events == []
    other = changes.convert(event("createIndexes", 9), CAPTURED, 0)
    assert other.events == [] and other.notice == (
        "stream.event_ignored",
        {"operation": "createIndexes"},
    )


def test_uncaptured_namespaces_are_ignored() -> None:
    elsewhere = INSERT | {"ns": {"db": "engineering", "coll": "other"}}
    assert changes.convert(elsewhere, CAPTURED, 0).events == []
    # mongo-java-server reports a drop on the "$cmd" namespace
    assert (
        changes.convert(event("drop", ns={"db": "engineering", "coll": "$cmd"}), CAPTURED, 0).events
        == []
    )


def test_a_change_without_key_is_bad() -> None:
    with pytest.raises(changes.BadChange, match="documentKey"):
        changes.convert({k: v for k, v in INSERT.items() if k != "documentKey"}, CAPTURED, 0)
    with pytest.raises(changes.BadChange, match="fullDocument"):
        changes.convert(INSERT | {"fullDocument": None}, CAPTURED, 0)


# -- the streaming loop's transaction cut ---------------------------------------------------


class FakeReader:
    """A stream reader over a list of events (what StreamSet needs of StreamReader)."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.spec = StreamSpec(
            "engineering.users", "engineering", "users", (("engineering", "users"),)
        )
        self._events = list(events)
        self._position = -1
        self._sequence = 0
        self.token: dict[str, Any] | None = None

    def next(self) -> dict[str, Any] | None:
        return self._events.pop(0) if self._events else None

    def push_back(self, change: dict[str, Any]) -> None:
        self._events.insert(0, change)

    def advance(self, change: dict[str, Any]) -> int:
        self.token = change["_id"]
        now = change["clusterTime"].time << 32 | change["clusterTime"].inc
        self._sequence = self._sequence + 1 if now == self._position else 0
        self._position = now
        return self._sequence

    def idle_point(self) -> bool:
        return False

    def close(self) -> None:
        return None


def stream_set(
    events: list[dict[str, Any]], on_bad: str = "fail", max_bytes: int = BATCH_BYTES
) -> tuple[StreamSet, FakeReader]:
    reader = FakeReader(events)
    streams = StreamSet(
        [reader],  # type: ignore[list-item]
        CAPTURED,
        FieldTracker("mongodb"),
        on_bad,
        structlog.get_logger(),
        "mongodb://h/",
        max_bytes=max_bytes,
    )
    return streams, reader


def txn_insert(n: int, txn: int) -> dict[str, Any]:
    lsid = {"id": Binary(uuid.UUID(int=1).bytes, 4)}
    doc = {"_id": n}
    # Events of one transaction share its cluster time (one applyOps oplog entry).
    return event(
        "insert", 100 + txn, fullDocument=doc, documentKey=doc, lsid=lsid, txnNumber=Int64(txn)
    )


def test_a_transaction_is_not_cut_by_the_batch_limit() -> None:
    events = [txn_insert(n, 1) for n in range(5)] + [txn_insert(n, 2) for n in range(5, 7)]
    streams, _ = stream_set(events)
    first = streams.poll(3)
    assert first is not None and len(first.events) == 3 and streams.in_transaction
    second = streams.poll(3)
    assert second is not None and [e.key["_id"] for e in second.events] == [3, 4, 5]
    assert streams.in_transaction  # transaction 2 goes on: no offsets yet
    third = streams.poll(3)
    assert third is not None and [e.key["_id"] for e in third.events] == [6]
    assert not streams.in_transaction  # both ended: these offsets may be stored
    sequences = [e.source.sequence for e in first.events + second.events + third.events]
    assert sequences == [0, 1, 2, 3, 4, 0, 1]


def test_changes_outside_transactions_are_cut_anywhere() -> None:
    events = [
        event("insert", n + 1, fullDocument={"_id": n}, documentKey={"_id": n}) for n in range(5)
    ]
    streams, _ = stream_set(events)
    first = streams.poll(2)
    assert first is not None and len(first.events) == 2 and not streams.in_transaction
    assert len(first.schemas) == 1


def test_a_bad_change_fails_or_is_dead_lettered() -> None:
    bad = {k: v for k, v in INSERT.items() if k != "documentKey"}
    streams, _ = stream_set([bad])
    with pytest.raises(RecordError, match=r"engineering\.users"):
        streams.poll(10)
    streams, _ = stream_set([bad, INSERT], on_bad="dead_letter")
    collected = streams.poll(10)
    assert collected is not None and len(collected.dead_letters) == 1 and len(collected.events) == 1
    assert collected.dead_letters[0].payload["operationType"] == "insert"


def test_transaction_identity() -> None:
    assert transaction_of(INSERT) is None
    assert transaction_of(txn_insert(1, 4)) == transaction_of(txn_insert(2, 4))
    assert transaction_of(txn_insert(1, 4)) != transaction_of(txn_insert(1, 5))


def test_a_snapshot_request_in_the_signal_collection_ends_the_batch() -> None:
    signals_ns = {"db": "engineering", "coll": "signals"}
    mine = event("insert", 20, ns=signals_ns, documentKey={"_id": "r1"})
    mine["fullDocument"] = {"_id": "r1", "type": "snapshot", "table": "engineering.users"}
    theirs = event("insert", 21, ns=signals_ns, documentKey={"_id": "r2"})
    theirs["fullDocument"] = {"_id": "r2", "pipeline": "other"}
    reader = FakeReader([theirs, INSERT, mine, UPDATE])
    streams = StreamSet(
        [reader],  # type: ignore[list-item]
        CAPTURED,
        FieldTracker("mongodb"),
        "fail",
        structlog.get_logger(),
        "mongodb://h/",
        ("engineering", "signals"),
        "mine",
    )
    collected = streams.poll(10)
    assert collected is not None and [e.op for e in collected.events] == [Op.CREATE]
    assert streams.signals == [(mine["fullDocument"], (1625478000 << 32) | 20)]
    assert reader.token == mine["_id"]  # the request itself is covered by the batch's offsets


def _big_txn_insert(n: int, txn: int, size: int) -> dict[str, Any]:
    change = txn_insert(n, txn)
    change["fullDocument"] = {"_id": n, "blob": "x" * size}
    return change


def test_a_transaction_is_cut_by_the_byte_bound_where_the_count_would_cut_it() -> None:
    # Documents of ~40 kB under a 100 kB bound: three a batch (the third crosses it), the
    # transaction's pieces without offsets until its last change, every change once, in order.
    events = [_big_txn_insert(n, 1, 40_000) for n in range(7)]
    streams, _ = stream_set(events, max_bytes=100_000)
    polls = []
    while (got := streams.poll(1000)) is not None and got.events:
        polls.append(([e.key["_id"] for e in got.events], streams.in_transaction))
    assert polls == [([0, 1, 2], True), ([3, 4, 5], True), ([6], False)]


def test_one_change_over_the_byte_bound_still_flows() -> None:
    big = [_big_txn_insert(0, 1, 300_000), _big_txn_insert(1, 1, 10)]
    streams, _ = stream_set(big, max_bytes=100_000)
    first = streams.poll(1000)
    assert first is not None and [e.key["_id"] for e in first.events] == [0]
    assert streams.in_transaction
