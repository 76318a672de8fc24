"""What only a real replica set can show (``CDC_TEST_MONGO_URI``): mongo-java-server has no
multi-document transactions, no post-batch resume token, no database-level streams and no
``drop``/``invalidate`` events as mongod sends them. These paths are unit-tested on hand-built
events (``tests/unit/test_mongo_changes.py``); here they run end to end when a real server is
given, and are skipped on mongo-java-server, which cannot do them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.events import Op
from tests.integration.mongo_kit import database, harness, is_real

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def real_server(mongo_server: Any) -> Any:
    if not is_real(mongo_server):
        pytest.skip("needs a real replica set (CDC_TEST_MONGO_URI); mongo-java-server cannot")
    return mongo_server


def test_a_transaction_commits_as_one_batch(real_server: Any, tmp_path: Path) -> None:
    with database(real_server.uri) as db:
        db.create_collection("a")
        db.create_collection("b")
        tables = [f"{db.name}.a", f"{db.name}.b"]
        with harness(real_server.uri, tmp_path, tables) as h:  # auto: one database stream
            h.open()
            with db.client.start_session() as session, session.start_transaction():
                db.a.insert_many([{"_id": n} for n in range(6)], session=session)
                db.b.insert_one({"_id": "x"}, session=session)
            h.run_until(lambda: len(h.events) >= 7, 30)
    positions = {e.source.position for e in h.events}
    assert len(positions) == 1  # one cluster time for the whole transaction
    assert [e.source.sequence for e in h.events] == list(range(7))
    assert {e.source.tx_id for e in h.events} != {None}


def test_transaction_cut_by_the_batch_limit_commits_at_its_end(
    real_server: Any, tmp_path: Path
) -> None:
    with database(real_server.uri) as db:
        db.create_collection("a")
        with harness(real_server.uri, tmp_path, [f"{db.name}.a"]) as h:
            h.open()
            with db.client.start_session() as session, session.start_transaction():
                db.a.insert_many([{"_id": n} for n in range(10)], session=session)
            deadline = time.monotonic() + 30
            while len(h.events) < 10 and time.monotonic() < deadline:
                h.step(max_events=4)
            # Inside the harness: closing it drops an open transaction, which would hide one.
            assert h._tx is None  # the last piece committed
            commits_during = len(h.commits)
    assert len(h.events) == 10 and commits_during >= 1


def test_an_idle_stream_stores_the_post_batch_resume_token(
    real_server: Any, tmp_path: Path
) -> None:
    with database(real_server.uri) as db:
        db.create_collection("quiet")
        db.create_collection("busy")
        with harness(real_server.uri, tmp_path, [f"{db.name}.quiet"]) as h:
            h.open()
            first = None
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                db.busy.insert_one({})  # moves the oplog, not the captured collection
                h.step()
                stored = h.stored().get("streams", {})
                times = [s.get("cluster_time") or 0 for s in stored.values()]
                if times and first is None:
                    first = max(times)
                if times and first is not None and max(times) > first:
                    break
            assert h.events == []
            assert first is not None and max(times) > first


def test_drop_truncates_and_invalidate_resumes_with_start_after(
    real_server: Any, tmp_path: Path
) -> None:
    with database(real_server.uri) as db:
        db.c.insert_one({"_id": 1})
        with harness(real_server.uri, tmp_path, [f"{db.name}.c"]) as h:
            h.open()
            db.c.drop()
            h.run_until(lambda: any(e.op is Op.TRUNCATE for e in h.events), 30)
            db.c.insert_one({"_id": 2})  # the collection comes back: the stream follows
            h.run_until(lambda: h.events[-1].op is Op.CREATE, 30)
            stored = h.stored()
    assert [e.op for e in h.events] == [Op.TRUNCATE, Op.CREATE]
    assert all(s["resume_token"] for s in stored["streams"].values())
