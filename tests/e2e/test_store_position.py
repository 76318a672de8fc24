"""Each sink's own store holds, beside its offsets, the source position its data is consistent
up to (:mod:`cdc.runtime.store_position`): DuckDB, PostgreSQL and Redis behind one ``cdc run``.

While a writer inserts rows as fast as it can, one a transaction, each store is read again and
again in one snapshot (its position and its rows together): every row whose commit is at or
before the stored position is there, so the store never claims a position its data does not
hold (a position read from the log at write time, rather than the one the batch's offsets reach,
fails this). Once the writes stop, the stored position
reaches the last write's, and after the pipeline stops ``cdc status`` shows it from the stores.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pytest
import redis

from connectors.postgres.lsn import Lsn
from sinks.duckdb.reader import open_for_reading
from tests.e2e.cli_helpers import cdc, http_get, start_run, stop, wait_for
from tests.services.ports import LOOPBACK, free_port

WRITES = 600
SINKS = ("wh", "replica", "cache")

#: A store read in one snapshot: ``(stored position or None, ids of the rows it holds)``.
Snapshot = tuple[Lsn | None, set[int]]


def _pipeline(tmp_path: Path, name: str, dsn: str, url: str, listen: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"""version: 1
name: {name}
source: {{type: postgres, dsn: '{dsn}', tables: [public.notes]}}
log: {{type: embedded, path: '{tmp_path / "log"}'}}
sinks:
  - {{name: wh, type: duckdb, path: '{tmp_path / "wh.duckdb"}'}}
  - {{name: replica, type: postgres, dsn: '{dsn}', schema: {name}}}
  - {{name: cache, type: redis, url: '{url}'}}
metrics: {{listen: '{listen}'}}
"""
    )
    return path


@pytest.fixture
def scene(pg_db: str, redis_server: Any, tmp_path: Path) -> Iterator[dict[str, Any]]:
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    listen = f"{LOOPBACK}:{free_port()}"
    name = f"held_{uuid.uuid4().hex[:8]}"
    path = _pipeline(tmp_path, name, pg_db, redis_server.url, listen)
    run = start_run(path, tmp_path)
    try:
        wait_for(
            lambda: http_get(f"http://{listen}/readyz")[0] == 200,
            60,
            0.1,
            run,
            tmp_path / "run.log",
        )
        yield {"path": path, "run": run, "dsn": pg_db, "url": redis_server.url, "name": name}
    finally:
        if run.poll() is None:
            stop(run)
        cdc("drop", str(path), "--yes", cwd=tmp_path)


def _lsn(text: Any) -> Lsn | None:
    return None if text is None else Lsn.parse(str(text))


def _duckdb(scene: dict[str, Any], tmp_path: Path) -> Snapshot:
    """Position and rows in one read (a stable copy of the file while ``cdc run`` holds it)."""
    with open_for_reading(tmp_path / "wh.duckdb") as con:
        con.execute("BEGIN TRANSACTION")
        try:
            row = con.execute('SELECT position FROM "_cdc".consistent_position').fetchone()
            ids = {i for (i,) in con.execute('SELECT id FROM "public"."notes"').fetchall()}
        except duckdb.CatalogException:
            return None, set()  # nothing applied yet
        finally:
            con.execute("ROLLBACK")
    return _lsn(None if row is None else row[0]), ids


def _postgres(scene: dict[str, Any], tmp_path: Path) -> Snapshot:
    """Position and rows in one REPEATABLE READ snapshot."""
    schema = scene["name"]
    with psycopg.connect(scene["dsn"]) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if conn.execute("SELECT to_regclass(%s)", [f"{schema}.notes"]).fetchone() == (None,):
            return None, set()
        row = conn.execute(
            f"SELECT position FROM {schema}._cdc_positions WHERE pipeline = %s AND sink = %s",
            [scene["name"], "replica"],
        ).fetchone()
        ids = {i for (i,) in conn.execute(f"SELECT id FROM {schema}.notes").fetchall()}
    return _lsn(None if row is None else row[0]), ids


def _redis(scene: dict[str, Any], tmp_path: Path) -> Snapshot:
    """Position and rows in one MULTI/EXEC: no script call runs between them."""
    client = redis.Redis.from_url(scene["url"])
    keys = [f"{scene['name']}:public.notes:{n}" for n in range(WRITES)]
    with client.pipeline(transaction=True) as tx:
        tx.hget(f"{scene['name']}:__offsets:cache", "consistent_position")
        tx.mget(keys)
        position, values = tx.execute()
    client.close()
    ids = {orjson.loads(v)["id"] for v in values if v is not None}
    return _lsn(None if position is None else position.decode()), ids


READERS: dict[str, Callable[[dict[str, Any], Path], Snapshot]] = {
    "wh": _duckdb,
    "replica": _postgres,
    "cache": _redis,
}


def _write(dsn: str, written: dict[int, Lsn]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n in range(WRITES):
            conn.execute("INSERT INTO notes VALUES (%s, %s)", (n, f"note {n}"))
            after = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
            written[n] = Lsn.parse(str(after))


def _never_ahead(snapshot: Snapshot, written: dict[int, Lsn], sink: str) -> None:
    """Every row committed at or before the stored position is in the same snapshot."""
    position, ids = snapshot
    if position is None:
        return
    owed = {n for n, lsn in written.items() if lsn <= position}
    assert owed <= ids, f"{sink} claims {position} but lacks rows {sorted(owed - ids)}"


def test_each_store_holds_its_consistent_position_beside_its_offsets(
    scene: dict[str, Any], tmp_path: Path
) -> None:
    written: dict[int, Lsn] = {}  # row id -> the WAL position right after its commit
    seen: dict[str, Any] = {}
    writer = threading.Thread(target=_write, args=(scene["dsn"], written))
    writer.start()
    checked = dict.fromkeys(SINKS, 0)
    try:
        while writer.is_alive():
            for sink, read in READERS.items():
                snapshot = read(scene, tmp_path)
                _never_ahead(snapshot, dict(written), sink)
                checked[sink] += snapshot[0] is not None
    finally:
        writer.join()
    assert len(written) == WRITES
    assert all(checked.values()), checked  # each store held a position while rows came in
    last = written[WRITES - 1]

    def all_reached() -> bool:
        for sink, read in READERS.items():
            snapshot = read(scene, tmp_path)
            _never_ahead(snapshot, written, sink)
            seen[sink] = str(snapshot[0])
        return all(seen[s] != "None" and Lsn.parse(seen[s]) >= last for s in SINKS)

    wait_for(all_reached, 60, 0.2, scene["run"], tmp_path / "run.log", seen)
    assert stop(scene["run"])[0] == 0

    status = cdc("status", str(scene["path"]), "--json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    by_sink = {s["sink"]: s for s in orjson.loads(status.stdout)["sinks"]}
    for sink in SINKS:
        stored = by_sink[sink]["stored_position"]
        assert stored is not None and Lsn.parse(stored) >= last, (sink, by_sink[sink])
        assert by_sink[sink]["consistent_position"] is not None
    text = cdc("status", str(scene["path"]), cwd=tmp_path)
    for sink in SINKS:
        assert f"its store holds {by_sink[sink]['stored_position']}" in text.stdout, text.stdout
