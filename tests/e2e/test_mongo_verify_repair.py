"""``cdc verify --repair`` on a MongoDB pipeline into DuckDB and Redis: documents deleted, changed
and added directly in each sink are found, re-read by ``_id`` through the signal collection, an
``_id`` the collection no longer has is deleted in the sinks (its delete and tombstone in the
log), and verify then passes; and a repair cut by a restart resumes and deletes the same keys.

Redis is tampered with while ``cdc run`` runs; DuckDB admits one writer, the running sink, so it
is tampered with while ``cdc run`` is stopped. On mongo-java-server the pipeline uses
``stream_scope: collection`` (the only scope it delivers events to); against a real replica set
(``CDC_TEST_MONGO_URI``) the default ``auto``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest
import redis
from bson import ObjectId

from cdc.contracts.events import Op
from cdc.metrics.snapshot_report import request_outcome
from cdc.records.normalize import canonical
from connectors.mongodb import MongoSourcePlugin
from connectors.mongodb.convert import to_json
from sinks.keyed import key_suffix
from tests.e2e.cli_helpers import cdc, start_run, stop, tail_all, wait_for
from tests.integration.mongo_kit import Harness, database, harness, into_next_second, scope

pytestmark = pytest.mark.timeout(300)

OIDS = [ObjectId() for _ in range(5)]
#: ``_id`` values of each kind: integers, ObjectIds, strings.
IDS: list[Any] = [*range(40), *OIDS, "s1", "s2"]


def write_pipeline(tmp_path: Path, server: Any, db: str, redis_url: str, prefix: str) -> Path:
    path = tmp_path / "mr.yaml"
    path.write_text(
        f"version: 1\nname: mr\nsource:\n  type: mongodb\n  dsn: {server.uri}\n"
        f"  tables: [{db}.items]\n  stream_scope: {scope(server)}\n  max_await_ms: 200\n"
        f"  signal_collection: {db}.cdc_signals\n"
        "log:\n  type: embedded\n  partitions: 2\n"
        "sinks:\n  - name: warehouse\n    type: duckdb\n    path: out/mr.duckdb\n"
        f"  - name: cache\n    type: redis\n    url: {redis_url}\n    key_prefix: {prefix}\n"
    )
    return path


def verify(tmp_path: Path, pipeline: Path, *extra: str) -> tuple[int, Any]:
    result = cdc("verify", str(pipeline), "--json", *extra, cwd=tmp_path, timeout=280)
    assert result.stdout, result.stderr
    return result.returncode, orjson.loads(result.stdout)


def agree(tmp_path: Path, pipeline: Path) -> bool:
    """Every sink holds what the collection holds (after up to 30 s to reach the log's end)."""
    return verify(tmp_path, pipeline, "--wait", "30")[0] == 0


def verify_key(doc_id: Any) -> dict[str, Any]:
    """The key ``cdc verify`` names the document with ``_id`` ``doc_id`` by."""
    return {"_id": canonical(to_json(doc_id), "")}


def test_repair_of_tampered_duckdb_and_redis_sinks_fed_from_mongodb(
    mongo_server: Any, redis_server: Any, tmp_path: Path
) -> None:
    redis_server.start()
    prefix = f"mr{ObjectId()}"
    with database(mongo_server.uri) as db:
        db.items.insert_many([{"_id": i, "v": str(i), "n": {"k": [1, i]}} for i in IDS])
        pipeline = write_pipeline(tmp_path, mongo_server, db.name, redis_server.url, prefix)
        table = f"{db.name}.items"
        run = start_run(pipeline, tmp_path)
        try:
            wait_for(lambda: agree(tmp_path, pipeline), 120, 1, run)
            # Deleted at the source, and applied by every sink (verify agrees), before the
            # sinks get it back by tampering: the repair must delete it again.
            db.items.delete_one({"_id": 3})
            wait_for(lambda: agree(tmp_path, pipeline), 120, 1, run)
            tampered = {"cache": _tamper_redis(redis_server.url, prefix, table)}
            assert stop(run)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
            tampered["warehouse"] = _tamper_duckdb(tmp_path / "out" / "mr.duckdb", db.name)
            run = start_run(pipeline, tmp_path)
            code, report = verify(tmp_path, pipeline, "--repair", "--wait", "90")
            assert code == 0, orjson.dumps(report).decode()
            _check_repaired(report, tampered, table)
            code, after = verify(tmp_path, pipeline)
            assert code == 0, after
            assert {(r["sink"], r["state"]) for r in after} == {
                ("warehouse", "ok"),
                ("cache", "ok"),
            }
        finally:
            assert stop(run)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
        records = [r for r in tail_all(pipeline, f"mr.{table}", tmp_path) if r["key"] == {"_id": 3}]
    _check_the_source_delete_repaired(records)
    client = redis.Redis.from_url(redis_server.url)
    assert client.get(f"{prefix}:{table}:3") is None
    with duckdb.connect(str(tmp_path / "out" / "mr.duckdb")) as warehouse:
        ids = [json.loads(t) for (t,) in warehouse.execute(_ids_query(db.name)).fetchall()]
    assert 3 not in ids and 9002 not in ids and len(ids) == len(IDS) - 1


def _check_repaired(report: dict[str, Any], tampered: dict[str, list[Any]], table: str) -> None:
    """Every tampered ``_id`` was found in the sink it was tampered in, and repaired."""
    (repair,) = report["repaired"]
    assert repair["table"] == table and repair["outcome"] == "done", repair
    assert repair["requests"] and repair["error"] is None
    for sink, doc_ids in tampered.items():
        keys = repair["sinks"][sink]["keys"]
        assert sorted(map(orjson.dumps, keys)) == sorted(
            orjson.dumps(verify_key(i)) for i in doc_ids
        ), (sink, keys)
    before = {r["sink"]: r for r in report["before"]}
    cache, warehouse = before["cache"], before["warehouse"]
    assert cache["missing_in_sink"] == [verify_key(10)]
    assert cache["different"] == [verify_key(OIDS[0])]
    assert sorted(map(orjson.dumps, cache["extra_in_sink"])) == sorted(
        orjson.dumps(verify_key(i)) for i in (3, 9001)
    )
    assert warehouse["missing_in_sink"] == [verify_key(11)]
    assert warehouse["different"] == [verify_key("s1")]
    assert warehouse["extra_in_sink"] == [verify_key(9002)]
    assert all(r["state"] == "ok" for r in report["after"]), report["after"]


def _check_the_source_delete_repaired(records: list[dict[str, Any]]) -> None:
    """The key deleted at the source: its snapshot read, its streamed delete, and the repair's
    delete (a snapshot row's), each delete followed by its tombstone."""
    # A snapshot row's flag is "true", or "last" for the last record of the read.
    shapes = [_shape(r["value"]) for r in records]
    assert shapes == [("r", True), ("d", False), None, ("d", True), None], shapes
    assert records[3]["pos"] > records[1]["pos"]


def _shape(value: dict[str, Any] | None) -> tuple[str, bool] | None:
    """A record's op and whether a snapshot wrote it; ``None`` for a tombstone."""
    return None if value is None else (value["op"], value["source"]["snapshot"] != "false")


def _tamper_redis(url: str, prefix: str, table: str) -> list[Any]:
    """An ``_id`` deleted, one changed, one added, and the one the source deleted put back."""
    client = redis.Redis.from_url(url)
    rows = f"{prefix}:{table}:"

    def key(doc_id: Any) -> str:
        return rows + key_suffix({"_id": to_json(doc_id)})

    assert client.delete(key(10)) == 1
    row = orjson.loads(client.get(key(OIDS[0])) or b"null")
    client.set(key(OIDS[0]), orjson.dumps({**row, "v": "tampered"}))
    client.set(key(9001), orjson.dumps({"_id": 9001, "v": "added"}))
    client.set(key(3), orjson.dumps({"_id": 3, "v": "3", "n": {"k": [1, 3]}}))
    return [10, OIDS[0], 9001, 3]


def _ids_query(db: str) -> str:
    return f'SELECT CAST("_id" AS VARCHAR) FROM "{db}"."items"'


def _tamper_duckdb(path: Path, db: str) -> list[Any]:
    """An ``_id`` deleted, one changed, one added."""
    target = f'"{db}"."items"'
    with duckdb.connect(str(path)) as warehouse:
        texts = {
            json.dumps(json.loads(t)): t for (t,) in warehouse.execute(_ids_query(db)).fetchall()
        }
        gone, changed = texts[json.dumps(11)], texts[json.dumps("s1")]
        warehouse.execute(f'DELETE FROM {target} WHERE CAST("_id" AS VARCHAR) = ?', [gone])
        warehouse.execute(
            f'UPDATE {target} SET "v" = \'"tampered"\' WHERE CAST("_id" AS VARCHAR) = ?',
            [changed],
        )
        warehouse.execute(
            f'INSERT INTO {target} ("_id", "v", __cdc_position, __cdc_sequence) '
            "VALUES ('9002', '\"added\"', 0, 0)"
        )
    return [11, "s1", 9002]


def _signal_options(mongo_server: Any, db: Any, **extra: Any) -> dict[str, Any]:
    """The source's options for a repair: its stream scope and the signal collection."""
    return {
        "stream_scope": scope(mongo_server),
        "signal_collection": f"{db.name}.cdc_signals",
        **extra,
    }


def _streaming(h: Harness, db: Any, changed: Any) -> None:
    """Open the source and see it stream: one change (``_id`` ``changed``) collected."""
    h.open()
    into_next_second()  # mongo-java-server starts streams at a whole second
    db.c.update_one({"_id": changed}, {"$set": {"v": -1}})
    h.collect(1)


def test_a_repair_cut_by_a_restart_reads_its_keys_again_and_deletes_the_absent_ones(
    mongo_server: Any, tmp_path: Path
) -> None:
    with database(mongo_server.uri) as db:
        db.c.insert_many([{"_id": i, "v": i} for i in range(20)])
        table = f"{db.name}.c"
        # A commit after each document read.
        opts = _signal_options(mongo_server, db, snapshot_batch=1, snapshot_workers=1)
        with harness(mongo_server.uri, tmp_path, [table], **opts) as h:
            _streaming(h, db, 1)
            keys = [{"_id": 2}, {"_id": "5"}, {"_id": 99}]
            request = MongoSourcePlugin.request_repair(h.config, "mgt", table, keys)
            assert (request["keys"], request["ids"]) == (3, 3)
            h.run_until(lambda: _rows_read(h.stored()) >= 1)
            assert not any(e.op is Op.DELETE for e in h.events)  # none before the range ends
            h.close()
            cut = len(h.events)
            h.open()
            h.run_until(lambda: request["id"] in h.stored().get("finished_requests", []))
            db.c.insert_one({"_id": 100})
            h.run_until(lambda: h.events[-1].key == {"_id": 100})
    resumed = h.events[cut:-1]
    # The string "5" is gone (the number 5 is another document, not asked for): deleted.
    assert sorted((e.op.value, repr(e.key["_id"])) for e in resumed) == [
        ("d", "'5'"),
        ("d", "99"),
        ("r", "2"),
    ]
    (position,) = {e.source.position for e in resumed}
    assert h.events[0].source.position < position < h.events[-1].source.position


def _rows_read(entry: dict[str, Any]) -> int:
    running = entry.get("snapshot") or {}
    return sum(info["rows"] for info in running.get("collections", {}).values())


def test_a_document_id_is_found_whatever_the_order_of_its_fields(
    mongo_server: Any, tmp_path: Path
) -> None:
    """verify names a document ``_id`` with its fields sorted; MongoDB compares documents in
    their own field order, so the repair reads it field by field: the live document is read
    (not deleted), the one the collection lacks is deleted."""
    with database(mongo_server.uri) as db:
        db.c.insert_many([{"_id": {"tenant": 1, "n": "a"}, "v": 1}, {"_id": 7, "v": 7}])
        table = f"{db.name}.c"
        with harness(mongo_server.uri, tmp_path, [table], **_signal_options(mongo_server, db)) as h:
            _streaming(h, db, 7)
            cut = len(h.events)
            sorted_keys = [{"_id": {"n": "a", "tenant": 1}}, {"_id": {"n": "b", "tenant": 2}}]
            request = MongoSourcePlugin.request_repair(h.config, "mgt", table, sorted_keys)
            h.run_until(lambda: request["id"] in h.stored().get("finished_requests", []))
    repaired = sorted(((e.op.value, e.key["_id"]) for e in h.events[cut:]), key=str)
    assert repaired == [("d", {"n": "b", "tenant": 2}), ("r", {"tenant": 1, "n": "a"})]
    assert list(repaired[1][1]) == ["tenant", "n"]  # the live document's key, in its own order


def test_a_request_the_source_cannot_carry_out_ends_as_failed(
    mongo_server: Any, tmp_path: Path
) -> None:
    """A repair request the running source refuses (here ids that are no list of _id texts,
    as a CLI with another config or another version could write) is stored as failed with its
    reason: ``cdc verify --repair`` ends with it instead of waiting out its timeout."""
    with database(mongo_server.uri) as db:
        db.c.insert_many([{"_id": i} for i in range(3)])
        table = f"{db.name}.c"
        with harness(mongo_server.uri, tmp_path, [table], **_signal_options(mongo_server, db)) as h:
            _streaming(h, db, 1)
            request = {"_id": "bad1", "type": "snapshot", "table": table, "pipeline": "mgt"}
            db.cdc_signals.insert_one({**request, "ids": "not a list"})
            h.run_until(lambda: request_outcome(h.log.source_offsets(), "bad1") is not None)
            outcome = request_outcome(h.log.source_offsets(), "bad1")
    assert outcome == "failed: ids is not a list of lists of Extended JSON texts"
