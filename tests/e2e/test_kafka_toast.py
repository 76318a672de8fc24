"""PostgreSQL to Kafka through ``cdc run``: every record of a table with a large TOASTed column
carries the value as of its change, across SIGKILLs of the source and a deleted state store.

The workload is self-checking: ``body`` is a function of ``(id, gen)``, and only an update that
sets ``body`` changes ``gen``. An update that leaves ``body`` alone (PostgreSQL then sends it as
"unchanged TOAST") must get the body of the row's ``gen`` at that change. Reading the row when
the source processes the change (the old fill on Kafka) gives a later body, or none when the row
is gone; changes made while the source is down make sure it is processed late.
"""

from __future__ import annotations

import hashlib
import random
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psycopg

from cdc.config.models import KafkaLogConfig
from cdc.log.kafka import KafkaLog
from cdc.log.kafka.images import FILE_NAME
from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for

KEYS = 24


def body(key: int, gen: int) -> str:
    # 8 KiB, stored out of line without compression (STORAGE EXTERNAL): a TOASTed value.
    return hashlib.md5(f"{key}:{gen}".encode()).hexdigest() * 256


class Workload:
    """Random transactions over ``docs``; ``gens`` is each key's gen (``None``: deleted)."""

    def __init__(self, dsn: str, seed: int) -> None:
        self.dsn = dsn
        self.rng = random.Random(seed)
        self.gens: dict[int, int | None] = {}
        self.next_gen: dict[int, int] = {}

    def setup(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE docs (id int PRIMARY KEY, gen int, n int, body text)")
            conn.execute("ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL")
            conn.execute("CREATE TABLE marks (id int PRIMARY KEY)")
            for key in range(1, KEYS + 1):
                conn.execute("INSERT INTO docs VALUES (%s, 0, 0, %s)", (key, body(key, 0)))
                self.gens[key], self.next_gen[key] = 0, 1

    def run(
        self, transactions: int, pause_s: float = 0.0, until: threading.Event | None = None
    ) -> None:
        """Run ``transactions``; with ``until``, go on until it is set (ten times as many at
        most), so that a source killed mid-workload is killed while this still writes however
        slowly the machine lets the source start (a fixed count ended first under load)."""
        done = 0
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while done < transactions or (
                until is not None and not until.is_set() and done < 10 * transactions
            ):
                size = 40 if self.rng.random() < 0.1 else self.rng.randint(1, 6)
                with conn.transaction():
                    for _ in range(size):
                        self._change(conn, self.rng.randint(1, KEYS))
                done += 1
                time.sleep(pause_s)

    def late_sequences(self) -> None:
        """For every key: an untouched-body update, then a new body, a delete, a reinsert and
        another untouched-body update; with the source down, each is processed late."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for key in range(1, KEYS + 1):
                if self.gens[key] is None:
                    self._reinsert(conn, key)
                self._touch(conn, key)
                self._new_body(conn, key)
                self._touch(conn, key)
                conn.execute("DELETE FROM docs WHERE id = %s", (key,))
                self.gens[key] = None
                self._reinsert(conn, key)
                self._touch(conn, key)

    def mark(self, phase: int) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO marks VALUES (%s)", (phase,))

    def _change(self, conn: psycopg.Connection[Any], key: int) -> None:
        kind = self.rng.random()
        if self.gens[key] is None:
            self._reinsert(conn, key)
        elif kind < 0.5:
            self._touch(conn, key)
        elif kind < 0.8:
            self._new_body(conn, key)
        else:
            conn.execute("DELETE FROM docs WHERE id = %s", (key,))
            self.gens[key] = None

    def _touch(self, conn: psycopg.Connection[Any], key: int) -> None:
        conn.execute("UPDATE docs SET n = n + 1 WHERE id = %s", (key,))

    def _new_body(self, conn: psycopg.Connection[Any], key: int) -> None:
        gen = self._take_gen(key)
        conn.execute(
            "UPDATE docs SET gen = %s, body = %s WHERE id = %s", (gen, body(key, gen), key)
        )

    def _reinsert(self, conn: psycopg.Connection[Any], key: int) -> None:
        gen = self._take_gen(key)
        conn.execute("INSERT INTO docs VALUES (%s, %s, 0, %s)", (key, gen, body(key, gen)))

    def _take_gen(self, key: int) -> int:
        gen = self.gens[key] = self.next_gen[key]
        self.next_gen[key] = gen + 1
        return gen


def committed(bootstrap: str, topic: str) -> list[Any]:
    """Every committed record of ``topic`` (read_committed), partition by partition."""
    log = KafkaLog("reader", KafkaLogConfig(type="kafka", bootstrap_servers=bootstrap))
    try:
        ends = log.end_offsets(topic)
        return [r for p in sorted(ends) for r in log.read(topic, p, 0, 1_000_000)]
    finally:
        log.close()


def marked(bootstrap: str, name: str, phase: int) -> bool:
    try:
        records = committed(bootstrap, f"{name}.public.marks")
    except Exception:  # the topic does not exist yet
        return False
    return any(orjson.loads(r.key) == {"id": phase} for r in records if r.value is not None)


def kill_mid_phase(
    run: subprocess.Popen[str], writer: threading.Thread, bootstrap: str, topic: str, log: Path
) -> None:
    """Start ``writer`` and SIGKILL the source once it is provably mid-work: it has committed
    records of this phase to ``topic`` while the writer still writes (a kill before or after
    would test nothing, and fails here instead)."""
    reader = KafkaLog("watcher", KafkaLogConfig(type="kafka", bootstrap_servers=bootstrap))
    try:
        before = sum(reader.end_offsets(topic).values())
        writer.start()
        wait_for(
            lambda: sum(reader.end_offsets(topic).values()) > before or not writer.is_alive(),
            60,
            0.01,
            run,
            log,
        )
        assert writer.is_alive(), f"the workload ended before the source wrote to {topic}"
        stop(run, signal.SIGKILL)
    finally:
        reader.close()


def delete_store(tmp_path: Path, name: str) -> None:
    files = list((tmp_path / ".cdc" / name).glob(FILE_NAME + "*"))
    assert files, "the source keeps its latest-image store under .cdc/<name>"
    for path in files:
        path.unlink()


def check_records(bootstrap: str, name: str, table: dict[int, tuple[int, int]]) -> int:
    """Every docs record carries the body of its gen, none was filled by a read; the last
    record of each key is the table's row. Returns how many updates left the body alone."""
    latest: dict[int, tuple[int, int] | None] = {}
    untouched = 0
    for record in committed(bootstrap, f"{name}.public.docs"):
        key = orjson.loads(record.key)["id"]
        if record.value is None:
            latest[key] = None
            continue
        value = orjson.loads(record.value)
        after, source = value["after"], value["source"]
        if after is None:
            latest[key] = None
            continue
        as_of_change = after["body"] == body(key, after["gen"])
        assert as_of_change, (
            f"{record.topic}[{record.partition}]@{record.offset}: key {key} op {value['op']} "
            f"gen {after['gen']} carries another body ({str(after['body'])[:12]}...)"
        )
        assert "toast_fallback" not in source and "toast_unavailable" not in source, value
        latest[key] = (after["gen"], after["n"])
        untouched += value["op"] == "u" and after["n"] > 0
    assert {k: v for k, v in latest.items() if v is not None} == table
    return untouched


def table_rows(dsn: str) -> dict[int, tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, gen, n FROM docs").fetchall()
    return {key: (gen, n) for key, gen, n in rows}


@dataclass
class SourceRun:
    """``cdc run --role source`` of one pipeline, started again after each kill."""

    pipeline: Path
    cwd: Path
    env: dict[str, str]
    bootstrap: str
    name: str
    process: subprocess.Popen[str] | None = None

    @property
    def log(self) -> Path:
        return self.cwd / "run.log"

    def start(self) -> None:
        self.process = start_run(self.pipeline, self.cwd, self.env, "--role", "source")

    def wait_marked(self, phase: int) -> None:
        assert self.process is not None
        wait_for(lambda: marked(self.bootstrap, self.name, phase), 120, 0.5, self.process, self.log)

    def kill_mid(self, writer: threading.Thread) -> None:
        assert self.process is not None
        topic = f"{self.name}.public.docs"
        kill_mid_phase(self.process, writer, self.bootstrap, topic, self.log)


def write_pipeline(tmp_path: Path, name: str, bootstrap: str) -> Path:
    pipeline = tmp_path / "kt.yaml"
    pipeline.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{KT_DSN}}\n"
        "  tables: [public.docs, public.marks]\n  snapshot: initial\n  status_interval_s: 1\n"
        "  max_batch_events: 8\n"
        f"log:\n  type: kafka\n  bootstrap_servers: {bootstrap}\n  partitions: 3\n"
        "  session_timeout_ms: 6000\n"
    )
    return pipeline


def test_every_record_carries_the_toasted_value_as_of_its_change(
    pg_db: str, kafka_server: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_server.bootstrap_servers
    name = f"kt{uuid.uuid4().hex[:8]}"
    pipeline = write_pipeline(tmp_path, name, bootstrap)
    env = {"KT_DSN": pg_db}
    work = Workload(pg_db, seed=12)
    work.setup()
    source = SourceRun(pipeline, tmp_path, env, bootstrap, name)
    source.start()
    try:
        _run_the_three_phases(work, source)
    finally:
        assert source.process is not None
        if source.process.poll() is None:
            stop(source.process, signal.SIGKILL)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
    untouched = check_records(bootstrap, name, table_rows(pg_db))
    assert untouched >= 3 * KEYS  # the late sequences alone give this many
    _check_the_run_log(source.log.read_text(), name)


def _run_the_three_phases(work: Workload, source: SourceRun) -> None:
    # Phase 1: live, after the initial snapshot.
    work.run(40)
    work.mark(1)
    source.wait_marked(1)
    # Phase 2: SIGKILL mid-workload; changes while down; restart with the store as it was.
    _kill_mid_workload_and_change_while_down(work, source, transactions=60)
    source.start()
    work.mark(2)
    source.wait_marked(2)
    # Phase 3: SIGKILL; changes while down; the store deleted: it is restored from Kafka.
    _kill_mid_workload_and_change_while_down(work, source, transactions=30)
    delete_store(source.cwd, source.name)
    source.start()
    work.run(20)
    work.mark(3)
    source.wait_marked(3)
    assert source.process is not None
    code, _ = stop(source.process)
    assert code == 0, source.log.read_text()[-3000:]


def _kill_mid_workload_and_change_while_down(
    work: Workload, source: SourceRun, transactions: int
) -> None:
    killed = threading.Event()
    writer = threading.Thread(target=work.run, args=(transactions, 0.01, killed))
    try:
        source.kill_mid(writer)
    finally:
        killed.set()
        writer.join()
    work.late_sequences()


def _check_the_run_log(text: str, name: str) -> None:
    assert "toast.fallback_read" not in text and "toast.row_gone" not in text
    # The deleted store was rebuilt from the topic (the first start found it empty).
    restored = [
        event
        for event in map(orjson.loads, filter(lambda line: line.startswith("{"), text.splitlines()))
        if event["event"] == "images.restored" and event["topic"] == f"{name}.public.docs"
    ]
    assert len(restored) >= 2 and restored[-1]["keys"] > 0, restored
