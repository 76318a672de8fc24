"""Read-your-writes fences on a MongoDB pipeline (``cdc wait``, ``cdc.fence.wait``).

On mongo-java-server (the default) the position is the one the source stored after a write,
as ``cdc status`` prints it: with only the source running the fence times out (exit 1), and
once the sinks run it returns, with the written document in Redis. mongo-java-server reports no
cluster time, so ``--now`` exits 2 there and says why. Against a real replica set
(``CDC_TEST_MONGO_URI``) ``--now`` takes the cluster time: a fence after each write finds it in
Redis, a fence after a write to a collection the pipeline does not capture still returns (the
quiet stream's point moves with the server's post-batch resume tokens), and a stopped pipeline
times out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from cdc import fence
from cdc.config import pipeline as config_mod
from cdc.log.factory import open_log
from connectors.mongodb import MongoSourcePlugin
from connectors.mongodb.positions import MongoPosition
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.integration.mongo_kit import database, is_real, scope

pytestmark = pytest.mark.timeout(180)


def _pipeline(tmp_path: Path, name: str, uri: str, db: str, stream_scope: str, url: str) -> Path:
    path = tmp_path / "mongo.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: mongodb\n  dsn: '{uri}'\n"
        f"  tables: [{db}.notes]\n  stream_scope: {stream_scope}\n  max_await_ms: 200\n"
        f"log: {{type: embedded, path: '{tmp_path / 'log'}'}}\n"
        f"sinks:\n  - {{name: cache, type: redis, url: '{url}'}}\n"
    )
    return path


def _stored(path: Path) -> MongoPosition | None:
    """The position the source stored in the log, as a fence reads it."""
    log = open_log(config_mod.load(str(path)))
    try:
        return MongoSourcePlugin.position(log.source_offsets())
    finally:
        log.close()


def _note(url: str, name: str, db: str, key: int) -> dict[str, Any] | None:
    client = redis.Redis.from_url(url)
    try:
        value = client.get(f"{name}:{db}.notes:{key}")
    finally:
        client.close()
    return None if value is None else dict(orjson.loads(value))


@pytest.fixture
def scene(mongo_server: Any, redis_server: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    with database(mongo_server.uri) as db:
        db.create_collection("notes")
        name = f"mfence_{uuid.uuid4().hex[:8]}"
        path = _pipeline(
            tmp_path, name, mongo_server.uri, db.name, scope(mongo_server), redis_server.url
        )
        yield {
            "path": path,
            "db": db,
            "name": name,
            "url": redis_server.url,
            "real": is_real(mongo_server),
        }


def test_a_stored_position_is_waited_for_until_the_sinks_apply_it(
    scene: dict[str, Any], tmp_path: Path
) -> None:
    path, db, name, url = scene["path"], scene["db"], scene["name"], scene["url"]
    source = start_run(path, tmp_path, None, "--role", "source")
    sinks = None
    try:
        wait_for(lambda: _stored(path) is not None, 60, 0.1, source, tmp_path / "run.log")
        before = _stored(path)
        assert before is not None
        db.notes.insert_one({"_id": 1, "body": "one"})
        seen: dict[str, Any] = {}

        def moved() -> bool:
            seen["stored"] = now = _stored(path)
            return now is not None and now != before and not now < before

        wait_for(moved, 60, 0.1, source, tmp_path / "run.log", seen)
        target = str(seen["stored"])
        # Only the source runs: the sink never applies the write, the fence times out.
        late = cdc(
            "wait",
            str(path),
            "--sink",
            "cache",
            "--position",
            target,
            "--timeout-s",
            "1",
            cwd=tmp_path,
        )
        assert late.returncode == 1, (late.stdout, late.stderr)
        assert "timed out" in late.stderr
        assert _note(url, name, db.name, 1) is None
        sinks = start_run(path, tmp_path, None, "--role", "sinks")
        done = cdc(
            "wait",
            str(path),
            "--sink",
            "cache",
            "--position",
            target,
            "--timeout-s",
            "60",
            cwd=tmp_path,
        )
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert (_note(url, name, db.name, 1) or {}).get("body") == "one"
        reached = MongoSourcePlugin.parse_position(done.stdout.strip())
        assert isinstance(reached, MongoPosition) and not reached < seen["stored"]
        # cdc status prints the sink's consistent position in the form --position takes.
        status = orjson.loads(cdc("status", str(path), "--json", cwd=tmp_path).stdout)
        printed = status["sinks"][0]["consistent_position"]
        assert isinstance(MongoSourcePlugin.parse_position(printed), MongoPosition)
        again = cdc("wait", str(path), "--sink", "cache", "--position", printed, cwd=tmp_path)
        assert again.returncode == 0, (again.stdout, again.stderr)
        # The Python form, with a second write: its stored position, then the document.
        db.notes.update_one({"_id": 1}, {"$set": {"body": "changed"}})
        first = seen["stored"]
        wait_for(
            lambda: moved() and seen["stored"] != first, 60, 0.1, source, tmp_path / "run.log", seen
        )
        fence.wait(path, "cache", str(seen["stored"]), timeout_s=60)
        assert (_note(url, name, db.name, 1) or {}).get("body") == "changed"
    finally:
        for run in (source, sinks):
            if run is not None and run.poll() is None:
                stop(run)


def test_now_without_a_cluster_time_exits_2_and_says_why(
    scene: dict[str, Any], tmp_path: Path
) -> None:
    if scene["real"]:
        pytest.skip("a real replica set reports its cluster time (see the test below)")
    result = cdc(
        "wait", str(scene["path"]), "--sink", "cache", "--now", "--timeout-s", "1", cwd=tmp_path
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "reports no cluster time" in result.stderr and "replica set" in result.stderr
    with pytest.raises(fence.FenceError, match="reports no cluster time"):
        fence.wait(scene["path"], "cache", timeout_s=1)
    # Fences' kept reader connects at its first --now fence, and refuses the same way.
    with (
        fence.Fences(scene["path"]) as fences,
        pytest.raises(fence.FenceError, match="reports no cluster time"),
    ):
        fences.wait("cache", timeout_s=1)


def test_now_on_a_replica_set_reaches_each_write_and_times_out_when_stopped(
    scene: dict[str, Any], tmp_path: Path
) -> None:
    if not scene["real"]:
        pytest.skip(
            "needs a real replica set (CDC_TEST_MONGO_URI): mongo-java-server has no cluster time"
        )
    path, db, name, url = scene["path"], scene["db"], scene["name"], scene["url"]
    run = start_run(path, tmp_path)
    try:
        wait_for(lambda: _stored(path) is not None, 60, 0.1, run, tmp_path / "run.log")
        with fence.Fences(path) as fences:
            for n in range(20):
                db.notes.insert_one({"_id": n, "body": f"note {n}"})
                fences.wait("cache", timeout_s=30)
                assert (_note(url, name, db.name, n) or {}).get("body") == f"note {n}"
            # A write the pipeline does not capture: the quiet stream's stored point still
            # passes the cluster time, through the post-batch resume tokens of its empty reads.
            db.create_collection("other")
            for n in range(5):
                db.other.insert_one({"_id": n})
                fences.wait("cache", timeout_s=30)
        now = cdc("wait", str(path), "--sink", "cache", "--now", "--timeout-s", "30", cwd=tmp_path)
        assert now.returncode == 0, (now.stdout, now.stderr)
        assert isinstance(MongoSourcePlugin.parse_position(now.stdout.strip()), MongoPosition)
        assert stop(run)[0] == 0
        db.notes.insert_one({"_id": "after", "body": "stopped"})
        stopped = cdc(
            "wait", str(path), "--sink", "cache", "--now", "--timeout-s", "1", cwd=tmp_path
        )
        assert stopped.returncode == 1, (stopped.stdout, stopped.stderr)
        assert "timed out" in stopped.stderr
    finally:
        if run.poll() is None:
            stop(run)
