"""Helpers of the snapshot end-to-end tests: a pipeline file, a paced concurrent writer, and the
per-key state of the log read back from another process."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg import sql

from cdc.contracts.snapshot_offsets import progress
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded.bulk import indexed
from cdc.testing import wait_until

PIPELINE = "snp"
TOPIC = f"{PIPELINE}.public.t"


def write_pipeline(tmp_path: Path, dsn: str, **source: Any) -> Path:
    """A pipeline of ``public.t`` into the embedded log at ``tmp_path/log``, no sinks."""
    lines = [
        "version: 1",
        f"name: {PIPELINE}",
        "source:",
        "  type: postgres",
        f"  dsn: '{dsn}'",
        "  tables: [public.t]",
        *(f"  {k}: {v}" for k, v in source.items()),
        "log:",
        "  type: embedded",
        f"  path: {tmp_path / 'log'}",
    ]
    path = tmp_path / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def create_table(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text NOT NULL, n int NOT NULL)")
        conn.execute(
            "INSERT INTO t SELECT g, md5(g::text), 0 FROM generate_series(1, %s) g", (rows,)
        )


class Writer:
    """Inserts, updates and deletes random keys of ``table`` (``t``, with the columns of
    :func:`create_table`) at about ``rate`` changes per second, a few changes per transaction,
    until stopped."""

    def __init__(self, dsn: str, max_id: int, rate: int = 1000, table: str = "t") -> None:
        self.dsn, self.next_id, self.rate = dsn, max_id + 1, rate
        self.table = sql.Identifier(table)
        self.changes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            rng = random.Random(7)
            started = time.monotonic()
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    due = int((time.monotonic() - started) * self.rate) - self.changes
                    if due <= 0:
                        time.sleep(0.005)
                        continue
                    with conn.transaction():
                        for _ in range(min(due, 20)):
                            self._change(conn, rng)
        except BaseException as exc:
            self.error = exc

    def _change(self, conn: psycopg.Connection[Any], rng: random.Random) -> None:
        roll = rng.random()
        key = rng.randint(1, self.next_id)
        if roll < 0.45:
            query = "UPDATE {} SET n = n + 1, v = md5(random()::text) WHERE id = %s"
            conn.execute(sql.SQL(query).format(self.table), (key,))
        elif roll < 0.7:
            conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(self.table), (key,))
        else:
            query = sql.SQL("INSERT INTO {} VALUES (%s, 'new', 0)").format(self.table)
            conn.execute(query, (self.next_id,))
            self.next_id += 1
        self.changes += 1


def marker_lsn(dsn: str) -> int:
    """Commit a transactional logical message and return its LSN: once the stored position is
    past it, everything committed before it is in the log."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (pg_logical_emit_message(true, 'test.marker', 'x') - '0/0')::int8"
        ).fetchone()
    assert row is not None
    return int(row[0])


def offsets(log_dir: Path) -> dict[str, Any]:
    log = EmbeddedLog(log_dir)
    try:
        return log.source_offsets()
    finally:
        log.close()


def stored_lsn(log_dir: Path) -> int:
    if not log_dir.exists():
        return 0
    return int((offsets(log_dir).get("postgres") or {}).get("lsn", 0))


def snapshot_tables(log_dir: Path) -> dict[str, Any]:
    if not log_dir.exists():
        return {}
    return dict((progress(offsets(log_dir)) or {}).get("tables") or {})


def chunks_done(entry: dict[str, Any]) -> set[int]:
    return {i for a, b in entry.get("done", []) for i in range(a, b + 1)}


def key_index_present(log_dir: Path) -> bool:
    """Whether the log's key index exists (an initial snapshot drops it while it writes)."""
    conn = sqlite3.connect(log_dir / "log.sqlite3")
    try:
        return indexed(conn)
    finally:
        conn.close()


def compacted_keys(log_dir: Path, topic: str = TOPIC) -> tuple[int, int]:
    """Records and distinct keys left in ``topic`` after a compaction pass."""
    log = EmbeddedLog(log_dir)
    try:
        log.compact()
        keys = [r.key for p in log.end_offsets(topic) for r in log.read(topic, p, 0, 10**7)]
    finally:
        log.close()
    return len(keys), len(set(keys))


def topic_state(log_dir: Path, topic: str = TOPIC) -> dict[int, dict[str, Any]]:
    """Latest ``after`` per key in ``topic``, tombstones removing keys."""
    log = EmbeddedLog(log_dir)
    state: dict[int, dict[str, Any]] = {}
    try:
        for partition in sorted(log.end_offsets(topic)):
            offset = 0
            while records := log.read(topic, partition, offset, 20_000):
                for record in records:
                    key = orjson.loads(record.key or b"{}")["id"]
                    if record.value is None:
                        state.pop(key, None)
                    else:
                        state[key] = orjson.loads(record.value)["after"]
                offset = records[-1].offset + 1
    finally:
        log.close()
    return state


def table_state(dsn: str) -> dict[int, dict[str, Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT id, v, n FROM t").fetchall()
    return {i: {"id": i, "v": v, "n": n} for i, v, n in rows}


def run_log_events(cwd: Path, name: str) -> list[dict[str, Any]]:
    """JSON log lines of ``cdc run`` (``cwd/run.log``) with event ``name``.

    A run killed with SIGKILL may leave its last line without its newline, or cut short, and
    the next run's first line then follows on the same line: each line is read as the JSON
    documents it holds, a cut one skipped.
    """
    found = []
    for line in (cwd / "run.log").read_text().splitlines():
        if line.startswith("{") and f'"{name}"' in line:
            found.extend(d for d in _documents(line) if d.get("event") == name)
    return found


def _documents(line: str) -> list[dict[str, Any]]:
    """The whole JSON objects of ``line``, in order (a cut one is skipped)."""
    decoder, out, at = json.JSONDecoder(), [], line.find("{")
    while at >= 0:
        try:
            document, end = decoder.raw_decode(line, at)
        except json.JSONDecodeError:
            at = line.find("{", at + 1)
            continue
        if isinstance(document, dict):
            out.append(document)
        at = line.find("{", end)
    return out


def kill_after_chunks(
    process: Any, log_dir: Path, table: str = "public.t", chunks: int = 2
) -> None:
    """SIGKILL ``cdc run`` once ``table``'s snapshot stored ``chunks`` chunks as done."""
    wait_until(
        lambda: len(chunks_done(snapshot_tables(log_dir).get(table, {}))) >= chunks,
        120,
        0.05,
        describe="some chunks",
    )
    process.send_signal(signal.SIGKILL)
    process.wait(10)
