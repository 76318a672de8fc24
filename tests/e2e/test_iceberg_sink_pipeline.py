"""PostgreSQL to Apache Iceberg through the CLI: a random workload over the common types, a table
with a composite key and unchanged TOAST, and two SIGKILLs of ``cdc run`` mid-work, with commits
every second or 300 rows, so the kills land with changes buffered and commits under way. After
a clean stop (which commits the buffer) the tables equal the source: ``cdc verify`` (which reads
them through pyiceberg) agrees, each key is one row, and DuckDB, reading the current snapshot's
Parquet files on its own (its ``iceberg`` extension is downloaded from the internet, which this
machine does not reach), sees the same keys. A fence (``cdc wait``) on the sink returns, and the
sink stores its consistent position in its namespace's properties, which ``cdc status`` shows
once the pipeline is stopped.
"""

from __future__ import annotations

import random
import socket
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psycopg
import pyarrow.compute as pc
import yaml

from connectors.postgres.lsn import str_to_lsn
from sinks.iceberg import IcebergSinkConfig
from sinks.iceberg.plugin import IcebergSinkPlugin
from sinks.iceberg.sink import open_catalog
from sinks.iceberg.tables import state
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for
from tests.e2e.shop_workload import Workload, create
from tests.e2e.sinks_kit import topic_ends
from tests.e2e.test_pg_all_sinks import kill_mid_work, table_records, wait_caught_up, wait_status

TABLES = {"everything": ["id"], "lines": ["order_id", "line_no"]}


def _pipeline(tmp_path: Path, port: int) -> tuple[Path, dict[str, Any]]:
    sink = {
        "name": "lake",
        "type": "iceberg",
        "catalog": {"type": "sql", "uri": f"sqlite:///{tmp_path}/lake/catalog.db"},
        "warehouse": str(tmp_path / "lake" / "wh"),
        "commit_interval_s": 1,
        "max_rows": 300,
    }
    data = {
        "version": 1,
        "name": "shop",
        "metrics": {"listen": f"127.0.0.1:{port}"},
        "source": {
            "type": "postgres",
            "dsn": "${PG_DSN}",
            # a2 is integer[][]: an Iceberg list column is one-dimensional (docs/sinks/iceberg.md)
            "tables": [
                {"name": "public.everything", "columns": {"exclude": ["a2"]}},
                "public.lines",
            ],
            "snapshot": "initial",
            "status_interval_s": 1,
        },
        "sinks": [sink],
    }
    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, sink


def test_postgres_to_iceberg_after_two_sigkills_equals_the_source(
    pg_db: str, tmp_path: Path
) -> None:
    installed = {ep.name for ep in entry_points(group="cdc.sinks")}
    assert "iceberg" in installed, f"the iceberg sink is not installed: {sorted(installed)}"
    create(pg_db, rows=600)
    env = {"PG_DSN": pg_db}
    port = _free_port()
    pipeline, sink = _pipeline(tmp_path, port)
    config = IcebergSinkConfig(**sink)
    workload = Workload(pg_db)
    workload.start()
    try:
        rng, records = random.Random(11), 0
        for _ in range(2):
            process = start_run(pipeline, tmp_path, env)
            records = kill_mid_work(process, workload, tmp_path, pipeline, env, records, rng)
        process = start_run(pipeline, tmp_path, env)
        more = records + 50  # the last run streams the workload too before it stops
        wait_status(process, tmp_path, pipeline, env, lambda r: table_records(r) >= more)
    finally:
        workload.stop()
    wait_caught_up(process, tmp_path, pipeline, env, pg_db, timeout=240)
    _metrics_count_the_changes(port)
    reached = _fence_and_stored_position(process, config, pipeline, tmp_path, env, pg_db)
    # The group's offsets run ahead of the tables by up to an interval; a clean stop commits
    # what the sink holds, so every table's last commit stores its topic's end offsets.
    assert stop(process)[0] == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert _committed(config, pipeline, tmp_path, env)
    _status_shows_the_stored_position(config, pipeline, tmp_path, env, pg_db, reached)
    result = cdc("verify", str(pipeline), "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert {(r["sink"], r["ok"]) for r in orjson.loads(result.stdout)} == {("lake", True)}
    for table, keys in TABLES.items():
        _assert_one_row_per_key_and_duckdb_agrees(config, table, keys)
    cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _metrics_count_the_changes(port: int) -> None:
    """The runtime's sink task reports the contract's metrics for this sink as for any."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    labels = 'pipeline="shop",sink="lake"'
    applied = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("cdc_sink_applied_total{") and labels in line
    ]
    assert applied and sum(applied) > 0, text[-2000:]
    assert f'cdc_sink_state{{{labels},state="running"}} 1.0' in text


def _fence_and_stored_position(
    process: Any,
    config: IcebergSinkConfig,
    pipeline: Path,
    cwd: Path,
    env: dict[str, str],
    dsn: str,
) -> int:
    """``cdc wait`` returns for the sink; then, idle, the sink stores a position at or after
    the fence's in its namespace (after the commits of the changes before it). Returns it."""
    fenced = cdc(
        "wait", str(pipeline), "--sink", "lake", "--now", "--timeout-s", "60", cwd=cwd, env=env
    )
    assert fenced.returncode == 0, fenced.stdout + fenced.stderr
    target = str_to_lsn(fenced.stdout.strip())
    seen: dict[str, Any] = {}

    def stored_reaches() -> bool:
        seen["stored"] = IcebergSinkPlugin.read_consistent_position(config, pipeline="shop")
        return seen["stored"] is not None and str_to_lsn(seen["stored"]) >= target

    wait_for(stored_reaches, 60, 0.2, process=process, log=cwd / "run.log", last_seen=seen)
    return target


def _status_shows_the_stored_position(
    config: IcebergSinkConfig, pipeline: Path, cwd: Path, env: dict[str, str], dsn: str, low: int
) -> None:
    """With no process serving the sink, ``cdc status`` reads the position its namespace
    holds: at or after the fence's, never past the source's WAL."""
    result = cdc("status", str(pipeline), "--json", cwd=cwd, env=env)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    sinks = {s["sink"]: s for s in orjson.loads(result.stdout)["sinks"]}
    stored = sinks["lake"]["stored_position"]
    assert stored == IcebergSinkPlugin.read_consistent_position(config, pipeline="shop")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    assert low <= str_to_lsn(stored) <= str_to_lsn(row[0])


def _committed(config: IcebergSinkConfig, pipeline: Path, cwd: Path, env: dict[str, str]) -> bool:
    """Every table's last commit stored its topic's end offsets."""
    ends = topic_ends(pipeline, cwd, env)
    catalog = open_catalog(config)
    for table in TABLES:
        stored, _ = state(catalog.load_table(("shop", table)))
        wanted = ends.get(f"shop.public.{table}", {})
        if {str(tp.partition): o for tp, o in stored.items()} != {
            p: int(o) for p, o in wanted.items()
        }:
            return False
    return True


def _assert_one_row_per_key_and_duckdb_agrees(
    config: IcebergSinkConfig, table: str, keys: list[str]
) -> None:
    found = open_catalog(config).load_table(("shop", table))
    rows = found.scan().to_arrow()
    assert rows.group_by(keys).aggregate([([], "count_all")]).num_rows == rows.num_rows, table
    live = rows.filter(pc.invert(rows["_cdc_deleted"]))
    assert live.num_rows > (500 if table == "everything" else 150), table
    # Copy-on-write leaves no delete files: the current snapshot's data files are the table.
    files = [task.file.file_path.removeprefix("file://") for task in found.scan().plan_files()]
    assert all(not task.delete_files for task in found.scan().plan_files())
    with duckdb.connect() as db:
        key_list = ", ".join(keys)
        query = f"SELECT {key_list} FROM read_parquet(?) WHERE NOT _cdc_deleted ORDER BY {key_list}"
        seen = db.execute(query, [files]).fetchall()  # test SQL: names from TABLES
    assert seen == sorted(tuple(r[k] for k in keys) for r in live.select(keys).to_pylist())
