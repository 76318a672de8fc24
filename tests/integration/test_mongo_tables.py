"""Collections added to or removed from ``source.tables`` after the first start, against a real
server (mongo-java-server, or ``CDC_TEST_MONGO_URI``): an added one is snapshotted (its
documents predate the pipeline), a removed one stops being captured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from cdc.contracts.events import Op
from tests.integration.mongo_kit import database, harness, into_next_second, scope

pytestmark = pytest.mark.timeout(120)


def test_an_added_collection_is_snapshotted_and_a_removed_one_stops(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.a.insert_many([{"_id": i, "v": i} for i in range(5)])
        db.b.insert_many([{"_id": i, "v": i} for i in range(30)])
        a, b = f"{db.name}.a", f"{db.name}.b"
        opts = {"snapshot": "initial", "stream_scope": scope(mongo_server)}
        with harness(mongo_server.uri, tmp_path, [a], **opts) as h:
            h.open()
            h.collect(5)
        with capture_logs() as logs, harness(mongo_server.uri, tmp_path, [a, b], **opts) as h:
            h.open()
            h.run_until(lambda: len([e for e in h.events if e.op is Op.READ]) >= 30)
            reads = sorted(e.key["_id"] for e in h.events if e.op is Op.READ)
            into_next_second()  # mongo-java-server starts streams at a whole second
            db.b.insert_one({"_id": 30, "v": 30})
            h.run_until(lambda: any(e.key == {"_id": 30} for e in h.events))
            assert sorted(h.stored()["captured"]) == sorted([a, b])
        assert reads == list(range(30))  # b's documents, and only them: a is not read again
        assert {e.source.table for e in h.events if e.op is Op.READ} == {"b"}
        [added] = [e for e in logs if e["event"] == "source.tables_added"]
        assert added["tables"] == [b] and added["snapshot"] is True
        with capture_logs() as logs, harness(mongo_server.uri, tmp_path, [b], **opts) as h:
            h.open()
            into_next_second()
            db.a.insert_one({"_id": 99, "v": 99})
            db.b.insert_one({"_id": 31, "v": 31})
            h.run_until(lambda: any(e.key == {"_id": 31} for e in h.events), settle_s=1.0)
            stored = h.stored()
        assert all(e.source.table == "b" for e in h.events)
        [removed] = [e for e in logs if e["event"] == "source.tables_removed"]
        assert removed["tables"] == [a]
        assert stored["captured"] == [b]
        if opts["stream_scope"] == "collection":
            assert set(stored["streams"]) == {b}  # a's stream point is forgotten


def test_an_added_collection_is_not_snapshotted_under_never(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.a.insert_one({"_id": 0})
        db.b.insert_many([{"_id": i} for i in range(3)])
        a, b = f"{db.name}.a", f"{db.name}.b"
        opts = {"snapshot": "never", "stream_scope": scope(mongo_server)}
        with harness(mongo_server.uri, tmp_path, [a], **opts) as h:
            h.open()
            h.step()
        with capture_logs() as logs, harness(mongo_server.uri, tmp_path, [a, b], **opts) as h:
            h.open()
            into_next_second()
            db.b.insert_one({"_id": 3})
            h.run_until(lambda: any(e.key == {"_id": 3} for e in h.events))
        assert not [e for e in h.events if e.op is Op.READ]
        [added] = [e for e in logs if e["event"] == "source.tables_added"]
        assert added["snapshot"] is False and "never" in added["reason"]
