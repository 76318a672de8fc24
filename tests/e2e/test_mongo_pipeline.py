"""MongoDB pipelines through the CLI: DuckDB and Redis sinks checked by ``cdc verify``, and a
SIGKILL of ``cdc run`` in the middle of a stream followed by a restart, without loss.

On mongo-java-server the pipelines use ``stream_scope: collection`` (the only scope it delivers
events to); against a real replica set (``CDC_TEST_MONGO_URI``) the default ``auto``."""

from __future__ import annotations

import datetime as dt
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from bson import Binary, Decimal128, Int64, ObjectId

from cdc.config import pipeline as config
from connectors.mongodb import MongoSourcePlugin, extended_json
from tests.e2e.cli_helpers import (
    cdc,
    latest_per_key,
    start_run,
    status_json,
    stop,
    tail_all,
    wait_for,
)
from tests.integration.mongo_kit import database, private_server, scope

pytestmark = pytest.mark.timeout(180)


def write_pipeline(
    tmp_path: Path, uri: str, tables: list[str], stream_scope: str, sinks: str = ""
) -> Path:
    path = tmp_path / "mongo.yaml"
    path.write_text(
        f"version: 1\nname: mg\nsource:\n  type: mongodb\n  dsn: {uri}\n"
        f"  tables: [{', '.join(tables)}]\n  stream_scope: {stream_scope}\n"
        "  snapshot_range_docs: 400\n  max_await_ms: 200\n"
        f"log:\n  type: embedded\n  partitions: 2\n{sinks}"
    )
    return path


def status(tmp_path: Path, pipeline: Path) -> dict[str, Any]:
    return status_json(pipeline, tmp_path)


def caught_up(tmp_path: Path, pipeline: Path) -> bool:
    report = status(tmp_path, pipeline)
    source = report["source"]
    done = "last_snapshot" in source and "snapshot" not in source
    return done and all(s["lag"] == 0 for s in report["sinks"])


def document(n: int) -> dict[str, Any]:
    return {
        "_id": ObjectId() if n % 2 else n,
        "n": Int64(n),
        "price": Decimal128(f"{n}.10"),
        "when": dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=n),
        "blob": Binary(bytes([n % 256, 1, 2])),
        "nested": {"tags": ["x", n], "deep": {"ok": n % 3 == 0}},
        "ratio": n / 7,
    }


def test_duckdb_and_redis_sinks_fed_from_mongodb_pass_verify(
    mongo_server: Any, redis_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.orders.insert_many([document(n) for n in range(300)])
        db.customers.insert_one({"_id": "c1", "name": "Ada"})
        tables = [f"{db.name}.orders", f"{db.name}.customers"]
        sinks = _duckdb_and_redis_sinks(redis_server)
        pipeline = write_pipeline(tmp_path, mongo_server.uri, tables, scope(mongo_server), sinks)
        process = start_run(pipeline, tmp_path)
        try:
            wait_for(lambda: caught_up(tmp_path, pipeline), timeout=60, interval=0.5)
            _change_in_every_way_and_wait_for_the_log(db, tmp_path, pipeline, tables, process)
            wait_for(lambda: caught_up(tmp_path, pipeline), timeout=60, interval=0.5)
            result = cdc("verify", str(pipeline), "--json", cwd=tmp_path)
            report = status(tmp_path, pipeline)
        finally:
            assert stop(process)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
    _check_verify_and_the_snapshot_report(result, report, tables, pipeline)


def _duckdb_and_redis_sinks(redis_server: Any) -> str:
    return (
        "sinks:\n  - name: warehouse\n    type: duckdb\n    path: out/mg.duckdb\n"
        f"  - name: cache\n    type: redis\n    url: {redis_server.url}\n"
        f"    key_prefix: mg{int(time.time() * 1000)}\n"
    )


def _change_in_every_way_and_wait_for_the_log(
    db: Any, tmp_path: Path, pipeline: Path, tables: list[str], process: subprocess.Popen[str]
) -> None:
    first = db.orders.find_one({"_id": 4})
    assert first is not None
    topics = [f"mg.{t}" for t in tables]
    before = records_in(status(tmp_path, pipeline), *topics)
    db.orders.update_one({"_id": 4}, {"$set": {"nested.deep.ok": False, "new": [1]}})
    db.orders.replace_one({"_id": 6}, {"only": "this"})
    db.orders.delete_one({"_id": 8})
    db.orders.insert_one(document(1001))
    db.customers.update_one({"_id": "c1"}, {"$unset": {"name": ""}})
    # In the log first (6 records: the delete brings its tombstone), or the sinks' lag
    # of 0 could be from before the changes.
    wait_for(
        lambda: records_in(status(tmp_path, pipeline), *topics) >= before + 6,
        timeout=60,
        process=process,
        log=tmp_path / "run.log",
    )


def _check_verify_and_the_snapshot_report(
    result: subprocess.CompletedProcess[str],
    report: dict[str, Any],
    tables: list[str],
    pipeline: Path,
) -> None:
    compared = orjson.loads(result.stdout)
    assert result.returncode == 0, result.stdout
    assert {(r["sink"], r["table"]) for r in compared} == {
        (s, t) for s in ("warehouse", "cache") for t in tables
    }
    assert all(r["ok"] and r["skipped"] is None for r in compared)
    assert {r["source"]["count"] for r in compared if r["table"].endswith("orders")} == {300}
    source = report["source"]
    assert source["last_snapshot"]["rows"] == {tables[0]: 300, tables[1]: 1}
    assert set(source["streams"]) == {s.id for s in _specs(pipeline)}
    progress = {row["table"]: (row["state"], row["rows"]) for row in report["snapshot"]}
    assert progress == {tables[0]: ("done", 300), tables[1]: ("done", 1)}


def _specs(pipeline: Path) -> list[Any]:
    from connectors.mongodb.plan import plan_streams

    source = config.load(pipeline).source
    return plan_streams(source.collections(), source.stream_scope)  # type: ignore[attr-defined]


def appended(pipeline: Path, topic: str, cwd: Path) -> int:
    """Records committed to ``topic`` so far (``cdc tail`` would not stop while writes go on)."""
    return records_in(status(cwd, pipeline), topic)


def records_in(report: dict[str, Any], *topics: str) -> int:
    """Records the ``cdc status`` report counts in ``topics``."""
    ends = [t["end_offsets"] for t in report["topics"] if t["topic"] in topics]
    return sum(sum(e.values()) for e in ends)


def _writer(coll: Any, stop_event: threading.Event, done: list[int]) -> None:
    rng = random.Random(3)
    next_id = 200
    while not stop_event.is_set():
        roll = rng.random()
        if roll < 0.5:
            coll.insert_one({"_id": next_id, "v": 0, "history": []})
            done.append(next_id)
            next_id += 1
        elif roll < 0.85:
            coll.update_one({"_id": rng.randrange(next_id)}, {"$inc": {"v": 1}})
        else:
            coll.delete_one({"_id": rng.randrange(next_id)})
        time.sleep(0.02)


def test_sigkill_mid_stream_then_restart_loses_nothing(mongo_server: Any, tmp_path: Path) -> None:
    with private_server(mongo_server) as server, database(server.uri) as db:
        db.events.insert_many([{"_id": i, "v": 0, "history": []} for i in range(200)])
        table = f"{db.name}.events"
        pipeline = write_pipeline(tmp_path, server.uri, [table], scope(server))
        topic = f"mg.{table}"
        stop_event, inserted = threading.Event(), []
        writer = threading.Thread(target=_writer, args=(db.events, stop_event, inserted))
        writer.start()
        try:
            process, killed_at = _kill_mid_stream_and_restart(pipeline, topic, tmp_path, inserted)
        finally:
            stop_event.set()
            writer.join()
        records, collection = _stop_after_a_sentinel(db, pipeline, topic, tmp_path, process)
    state = latest_per_key(records)
    assert state == collection
    created = {r["key"]["_id"] for r in records if r["value"] and r["value"]["op"] == "c"}
    # Inserts before the first start point are snapshot rows; every later one, before, during
    # and after the kill, reached the log as an insert (deleted ones included).
    assert set(inserted[killed_at:]) <= created
    assert len(inserted) - killed_at > 20
    assert "source.opened" in (tmp_path / "run.log").read_text()


def _kill_mid_stream_and_restart(
    pipeline: Path, topic: str, tmp_path: Path, inserted: list[int]
) -> tuple[subprocess.Popen[str], int]:
    """SIGKILLs ``cdc run`` while the writer writes, and starts it again.

    Returns:
        The restarted run, and how many documents the writer had inserted at the kill.
    """
    process = start_run(pipeline, tmp_path)
    wait_for(lambda: appended(pipeline, topic, tmp_path) > 260, timeout=60)
    process.send_signal(signal.SIGKILL)
    assert process.wait(10) == -signal.SIGKILL
    killed_at, in_log = len(inserted), appended(pipeline, topic, tmp_path)
    # Changes keep coming while nothing captures them...
    wait_for(lambda: len(inserted) >= killed_at + 10, timeout=30)
    process = start_run(pipeline, tmp_path)
    # ...and while the restarted run has caught up with them and streams again.
    wait_for(
        lambda: (
            len(inserted) - killed_at > 20 and appended(pipeline, topic, tmp_path) >= in_log + 40
        ),
        timeout=60,
        process=process,
        log=tmp_path / "run.log",
    )
    return process, killed_at


def _stop_after_a_sentinel(
    db: Any, pipeline: Path, topic: str, tmp_path: Path, process: subprocess.Popen[str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Stops the run once a last insert reached the log.

    Returns:
        Every record of ``topic``, and the collection's documents by their key's JSON.
    """
    db.events.insert_one({"_id": "sentinel"})
    sentinel = orjson.dumps({"_id": "sentinel"}).decode()
    wait_for(lambda: sentinel in latest_per_key(_as_rows(tail_all(pipeline, topic, tmp_path))), 60)
    assert stop(process)[0] == 0
    records = _as_rows(tail_all(pipeline, topic, tmp_path))
    config_model = config.load(pipeline).source
    rows = MongoSourcePlugin.read_rows(config_model, db.name, "events")  # type: ignore[arg-type]
    collection = {orjson.dumps(key).decode(): row for key, row in rows}
    return records, collection


def _as_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tailed records as a sink reads them: Debezium's MongoDB key and Extended JSON texts
    turned back into ``{"_id": ...}`` keys and row objects
    (:mod:`connectors.mongodb.extended_json`)."""
    out = []
    for record in records:
        key, value = extended_json.rows(record["topic"], record["key"], record["value"])
        out.append({**record, "key": key, "value": value})
    return out


def test_cdc_snapshot_rereads_a_collection_while_the_pipeline_runs(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.items.insert_many([{"_id": n, "v": n} for n in range(50)])
        table = f"{db.name}.items"
        path = write_pipeline(tmp_path, mongo_server.uri, [table], scope(mongo_server))
        text = path.read_text().replace(
            "  snapshot_range_docs: 400\n",
            f"  snapshot_range_docs: 20\n  snapshot: never\n"
            f"  signal_collection: {db.name}.cdc_signals\n",
        )
        path.write_text(text)
        process = start_run(path, tmp_path)
        try:
            stored = lambda: status(tmp_path, path)["source"]["offsets"]  # noqa: E731
            wait_for(lambda: "mongodb" in stored(), timeout=30)
            result = cdc(
                "snapshot", str(path), "--table", table, "--wait", "--timeout-s", "60", cwd=tmp_path
            )
            db.items.insert_one({"_id": 50, "v": 50})
            topic = f"mg.{table}"
            wait_for(lambda: len(latest_per_key(tail_all(path, topic, tmp_path))) == 51, 30)
        finally:
            assert stop(process)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert result.returncode == 0, result.stderr
    assert "requested snapshot" in result.stdout and "done" in result.stdout.splitlines()[-1]
    report = status(tmp_path, path)
    assert [(r["table"], r["state"], r["rows"]) for r in report["snapshot"]] == [
        (table, "done", 50)
    ]


def test_the_number_5_and_the_string_5_are_two_documents_in_every_sink(
    mongo_server: Any, redis_server: Any, tmp_path: Path
) -> None:
    # A collection's _id may be of any type: 5 and "5" (and true and "true") are four documents,
    # four rows in each sink, and verify tells them apart. The Redis sink once wrote both under
    # the key ":5" (the second overwrote the first) and verify named both "5", so it agreed.
    ids: list[Any] = [5, "5", 7.5, "7.5", True, "true", "abc"]
    with database(mongo_server.uri) as db:
        db.docs.insert_many([{"_id": i, "v": n} for n, i in enumerate(ids)])
        tables = [f"{db.name}.docs"]
        prefix = f"mix{int(time.time() * 1000)}"
        sinks = (
            "sinks:\n  - name: warehouse\n    type: duckdb\n    path: out/mg.duckdb\n"
            f"  - name: cache\n    type: redis\n    url: {redis_server.url}\n"
            f"    key_prefix: {prefix}\n"
            f"  - name: search\n    type: search\n    path: {tmp_path / 'out' / 'search'}\n"
        )
        pipeline = write_pipeline(tmp_path, mongo_server.uri, tables, scope(mongo_server), sinks)
        process = start_run(pipeline, tmp_path)
        try:
            wait_for(lambda: caught_up(tmp_path, pipeline), timeout=60, interval=0.5)
            before = records_in(status(tmp_path, pipeline), f"mg.{tables[0]}")
            db.docs.insert_many([{"_id": 8, "v": 10}, {"_id": "8", "v": 11}])
            db.docs.delete_one({"_id": "5"})  # the string: the number stays
            db.docs.update_one({"_id": 5}, {"$set": {"v": 12}})
            wait_for(  # 2 inserts, the delete and its tombstone, the update
                lambda: records_in(status(tmp_path, pipeline), f"mg.{tables[0]}") >= before + 5,
                timeout=60,
                process=process,
                log=tmp_path / "run.log",
            )
            wait_for(lambda: caught_up(tmp_path, pipeline), timeout=60, interval=0.5)
            agreed = cdc("verify", str(pipeline), "--json", cwd=tmp_path)
            client = redis.Redis.from_url(redis_server.url)
            try:
                held = {
                    k.decode().removeprefix(f"{prefix}:{tables[0]}:")
                    for k in client.keys(f"{prefix}:{tables[0]}:*")
                }
                assert client.delete(f'{prefix}:{tables[0]}:"8"') == 1  # the string "8" only
            finally:
                client.close()
            tampered = cdc("verify", str(pipeline), "--json", cwd=tmp_path)
        finally:
            assert stop(process)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert held == {"5", "7.5", '"7.5"', "true", '"true"', "abc", "8", '"8"'}
    assert agreed.returncode == 0, agreed.stdout
    compared = orjson.loads(agreed.stdout)
    assert {r["sink"] for r in compared} == {"warehouse", "cache", "search"}
    assert all(
        r["ok"] and r["source"]["count"] == 8 and r["sink_rows"]["count"] == 8 for r in compared
    )
    assert tampered.returncode == 1, tampered.stdout
    (cache,) = [r for r in orjson.loads(tampered.stdout) if r["sink"] == "cache"]
    assert cache["missing_in_sink"] == [{"_id": "8"}] and cache["different"] == []
    assert all(r["ok"] for r in orjson.loads(tampered.stdout) if r["sink"] != "cache")
