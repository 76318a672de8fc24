"""``cdc verify --repair`` on real PostgreSQL, DuckDB, Redis and the search sink: rows deleted,
changed and added directly in each store while a workload runs are found, re-read through the
online snapshot (deleted where the source has no such key), and verify then passes.

Redis is tampered with while ``cdc run`` runs; DuckDB and the Tantivy index each admit one
writer, the running sink, so they are tampered with while ``cdc run`` is stopped (the workload
goes on writing to PostgreSQL meanwhile, and the restarted run catches up).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import redis

from sinks.search.index import TableIndex, row_document
from tests.e2e.cli_helpers import cdc, start_run, stop

ROWS = 300
WORKLOAD_FIRST_ID = 1001


def write_pipeline(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{PG_DSN}}\n"
        "  tables: [public.items]\n  snapshot: initial\n  status_interval_s: 1\n"
        "sinks:\n"
        "  - name: warehouse\n    type: duckdb\n    path: out/p.duckdb\n"
        "  - name: cache\n    type: redis\n    url: ${REDIS_URL}\n"
        "  - name: search\n    type: search\n    path: out/search\n"
    )
    return path


class Workload(threading.Thread):
    """Inserts, updates and deletes rows of its own (ids from 1001) until stopped."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.stopped, self.commits = dsn, threading.Event(), 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            next_id = WORKLOAD_FIRST_ID
            while not self.stopped.is_set() and self.commits < 3000:
                with conn.transaction():
                    conn.execute("INSERT INTO public.items VALUES (%s, 'w', 0)", (next_id,))
                    conn.execute("UPDATE public.items SET qty = qty + 1 WHERE id = %s", (next_id,))
                    if next_id % 3 == 0:
                        conn.execute("DELETE FROM public.items WHERE id = %s", (next_id - 1,))
                next_id += 1
                self.commits += 1


def verify(tmp_path: Path, pipeline: Path, env: dict[str, str], *extra: str) -> Any:
    result = cdc("verify", str(pipeline), "--json", *extra, cwd=tmp_path, env=env, timeout=400)
    assert result.stdout, result.stderr
    return result.returncode, orjson.loads(result.stdout)


def test_repair_finds_and_repairs_tampered_sinks_while_a_workload_runs(
    pg_db: str, redis_server: Any, tmp_path: Path
) -> None:
    redis_server.start()
    name = f"rep_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id integer PRIMARY KEY, name text, qty integer)")
        conn.execute(
            "INSERT INTO public.items SELECT g, 'n' || g, g FROM generate_series(1, %s) g", (ROWS,)
        )
    env = {"PG_DSN": pg_db, "REDIS_URL": redis_server.url}
    pipeline = write_pipeline(tmp_path, name)
    run = start_run(pipeline, tmp_path, env)
    workload = Workload(pg_db)
    try:
        code, report = verify(tmp_path, pipeline, env, "--wait", "90")
        assert code == 0, report
        workload.start()
        tampered = {"cache": _tamper_redis(redis_server.url, name)}
        assert stop(run)[0] == 0
        tampered["warehouse"] = _tamper_duckdb(tmp_path / "out" / "p.duckdb")
        tampered["search"] = _tamper_search(tmp_path / "out" / "search")
        run = start_run(pipeline, tmp_path, env)
        code, report = verify(tmp_path, pipeline, env, "--repair", "--wait", "90")
        assert code == 0, report
        _check_repaired(report, tampered)
        workload.stopped.set()
        workload.join(30)
        assert workload.commits > 0
        code, after = verify(tmp_path, pipeline, env, "--wait", "90")
        assert code == 0, after
        assert {(r["sink"], r["state"]) for r in after} == {
            (s, "ok") for s in ("warehouse", "cache", "search")
        }
    finally:
        workload.stopped.set()
        stop(run)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def _check_repaired(report: dict[str, Any], tampered: dict[str, dict[str, set[int]]]) -> None:
    """Every tampered key was found and repaired, in the sink it was tampered in; any other
    key repaired is the workload's (a change of it in flight through every attempt)."""
    (repair,) = report["repaired"]
    assert repair["table"] == "public.items" and repair["outcome"] == "done", repair
    for sink, kinds in tampered.items():
        found = repair["sinks"][sink]
        ids = {k["id"] for k in found["keys"]}
        assert kinds["all"] <= ids, (sink, found)
        assert all(i >= WORKLOAD_FIRST_ID for i in ids - kinds["all"]), (sink, found)
    before = {r["sink"]: r for r in report["before"]}
    for sink, kinds in tampered.items():
        result = before[sink]
        assert {k["id"] for k in result["missing_in_sink"]} >= kinds["deleted"]
        assert {k["id"] for k in result["extra_in_sink"]} >= kinds["added"]
        assert {k["id"] for k in result["different"]} >= kinds["changed"]
    assert all(r["state"] == "ok" for r in report["after"]), report["after"]


def _kinds(deleted: set[int], changed: set[int], added: set[int]) -> dict[str, set[int]]:
    return {
        "deleted": deleted,
        "changed": changed,
        "added": added,
        "all": deleted | changed | added,
    }


def _tamper_redis(url: str, pipeline: str) -> dict[str, set[int]]:
    client = redis.Redis.from_url(url)
    prefix = f"{pipeline}:public.items:"
    assert client.delete(f"{prefix}5") == 1
    row = orjson.loads(client.get(f"{prefix}6") or b"null")
    client.set(f"{prefix}6", orjson.dumps({**row, "name": "tampered"}))
    client.set(f"{prefix}9001", orjson.dumps({"id": 9001, "name": "added", "qty": 1}))
    return _kinds({5}, {6}, {9001})


def _tamper_duckdb(path: Path) -> dict[str, set[int]]:
    with duckdb.connect(str(path)) as db:
        db.execute('DELETE FROM "public"."items" WHERE id = 10')
        db.execute('UPDATE "public"."items" SET name = \'tampered\' WHERE id = 11')
        db.execute(
            'INSERT INTO "public"."items" (id, name, qty, __cdc_position, __cdc_sequence) '
            "VALUES (9002, 'added', 1, 0, 0)"
        )
    return _kinds({10}, {11}, {9002})


def _tamper_search(root: Path) -> dict[str, set[int]]:
    index = TableIndex(root / "public.items", 50_000_000)
    try:
        changed = index.marks(['{"id":21}'])['{"id":21}']
        assert changed.row is not None
        index.delete_keys(['{"id":20}', '{"id":21}'])
        row = {**changed.row, "name": "tampered"}
        index.add(row_document('{"id":21}', changed.pos, changed.offset, row, "tampered"))
        added = {"id": 9003, "name": "added", "qty": 1}
        index.add(row_document('{"id":9003}', (0, 0), 0, added, "added"))
        index.commit()
    finally:
        index.close()
    return _kinds({20}, {21}, {9003})
