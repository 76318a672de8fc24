"""Whole pipelines on a real Kafka broker through the CLI: the generator source, the jsonl sink,
a third-party reader (kcat), a broker restart, a SIGKILLed source, and sink workers that share
partitions.

The generator's change ``n`` carries the position ``[n // transaction_size, n %
transaction_size]`` (the record's ``cdc.pos`` header), so "every change once" is checked
exactly: the committed topics hold each ``n`` of ``range(changes)`` once.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from cdc.config.models import KafkaLogConfig
from cdc.log.base import StoredRecord
from cdc.log.kafka import KafkaLog
from tests.e2e.cli_helpers import (
    cdc,
    cdc_env,
    kill_mid_workload,
    latest_per_key,
    start_run,
    status_json,
    stop,
    tail_all,
    wait_for,
)

TABLES = ("public.customers", "public.orders")


def write_pipeline(
    tmp_path: Path,
    bootstrap: str,
    changes: int,
    transaction_size: int = 20,
    rate: int | None = None,
    partitions: int = 3,
) -> tuple[Path, str]:
    name = f"k{uuid.uuid4().hex[:10]}"
    rate_line = f"  rate: {rate}\n" if rate else ""
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: generator\n"
        f"  tables: [{', '.join(TABLES)}]\n  changes: {changes}\n  keys: 200\n"
        f"  transaction_size: {transaction_size}\n{rate_line}"
        f"log:\n  type: kafka\n  bootstrap_servers: {bootstrap}\n  partitions: {partitions}\n"
        "  session_timeout_ms: 6000\n"
        "sinks:\n  - name: files\n    type: jsonl\n    path: ${OUT_DIR:-out/files}\n"
    )
    return path, name


def status(tmp_path: Path, pipeline: Path) -> dict[str, Any]:
    return status_json(pipeline, tmp_path)


def done(tmp_path: Path, pipeline: Path, changes: int) -> bool:
    """The source stored its last offset and the sink applied everything."""
    report = status(tmp_path, pipeline)
    stored = report["source"]["offsets"].get("generator", {}).get("next", 0)
    return bool(stored == changes and report["sinks"][0]["lag"] == 0)


def stored_next(tmp_path: Path, pipeline: Path) -> int:
    offsets = status(tmp_path, pipeline)["source"]["offsets"]
    return int(offsets.get("generator", {}).get("next", 0))


def topic_records(bootstrap: str, name: str) -> dict[str, list[StoredRecord]]:
    """Every committed record of each table topic (read_committed), by topic."""
    log = KafkaLog(name, KafkaLogConfig(type="kafka", bootstrap_servers=bootstrap))
    try:
        out = {}
        for table in TABLES:
            topic = f"{name}.{table}"
            out[topic] = [
                record
                for partition in sorted(log.end_offsets(topic))
                for record in log.read(topic, partition, 0, 1_000_000)
            ]
        return out
    finally:
        log.close()


def assert_every_change_once(bootstrap: str, name: str, changes: int, size: int) -> None:
    numbers = []
    for records in topic_records(bootstrap, name).values():
        for record in records:
            if record.value is not None:
                pos = orjson.loads(record.pos)  # the cdc.pos header
                numbers.append(pos[0] * size + pos[1])
    assert len(numbers) == len(set(numbers)), "a change was committed twice"
    assert sorted(numbers) == list(range(changes)), "a change is missing"


def jsonl_positions(out_dir: Path) -> list[tuple[str, int, int]]:
    lines = []
    for file in out_dir.glob("*.jsonl"):
        for line in file.read_bytes().splitlines():
            row = orjson.loads(line)
            lines.append((row["topic"], row["partition"], row["offset"]))
    return lines


def log_positions(bootstrap: str, name: str) -> set[tuple[str, int, int]]:
    return {
        (r.topic, r.partition, r.offset)
        for records in topic_records(bootstrap, name).values()
        for r in records
    }


def kcat_count(bootstrap: str, topic: str, isolation: str) -> int:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "install Debian's kafkacat package"
    argv = [kcat, "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%o\\n"]
    result = subprocess.run(
        [*argv, "-X", f"isolation.level={isolation}"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return len(result.stdout.splitlines())


def open_transactions(admin: AdminClient, topics: list[str], partitions: int) -> bool:
    """True while some partition has records past its last stable offset."""
    tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
    ends = {}
    for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, isolation_level=level)
        ends[level] = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
    return ends[IsolationLevel.READ_UNCOMMITTED] != ends[IsolationLevel.READ_COMMITTED]


def count_deletes_followed_by_tombstones(records: list[StoredRecord]) -> int:
    """Deletes in ``records``, each checked to be followed by its key's tombstone."""
    by_partition: dict[int, list[StoredRecord]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record)
    deletes = 0
    for rows in by_partition.values():
        for this, following in zip(rows, [*rows[1:], None], strict=True):
            if this.value is not None and orjson.loads(this.value)["op"] == "d":
                deletes += 1
                assert following is not None and following.value is None
                assert following.key == this.key
    return deletes


def test_kcat_reads_envelopes_tombstones_follow_deletes_and_status_shows_lag(
    kafka_server: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_server.bootstrap_servers
    pipeline, name = write_pipeline(tmp_path, bootstrap, changes=1500)
    run = start_run(pipeline, tmp_path)
    try:
        wait_for(lambda: done(tmp_path, pipeline, 1500), timeout=90, interval=0.5)
    finally:
        code, _ = stop(run)
    assert code == 0, (tmp_path / "run.log").read_text()
    report = status(tmp_path, pipeline)
    assert report["log"] == "kafka"
    assert [t["lag"] for t in report["sinks"][0]["topics"]] == [0, 0]
    assert_every_change_once(bootstrap, name, 1500, 20)

    topic = f"{name}.public.customers"
    deletes = count_deletes_followed_by_tombstones(topic_records(bootstrap, name)[topic])
    assert deletes > 0

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "install Debian's kafkacat package"
    argv = [kcat, "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-J"]
    result = subprocess.run(
        [*argv, "-X", "isolation.level=read_committed"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    messages = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(messages) == len(topic_records(bootstrap, name)[topic])
    values = [json.loads(m["payload"]) for m in messages if m["payload"] is not None]
    assert sum(1 for m in messages if m["payload"] is None) == deletes
    assert all(set(json.loads(m["key"])) == {"id"} for m in messages)
    assert all({"before", "after", "source", "op", "ts_ms"} <= set(v) for v in values)
    assert {v["op"] for v in values} == {"c", "u", "d"}
    assert all(v["source"]["connector"] == "generator" for v in values)


def test_a_broker_restart_mid_workload_loses_nothing(kafka_server: Any, tmp_path: Path) -> None:
    bootstrap = kafka_server.bootstrap_servers
    pipeline, name = write_pipeline(tmp_path, bootstrap, changes=3000, rate=500)
    run = start_run(pipeline, tmp_path)
    try:
        wait_for(lambda: stored_next(tmp_path, pipeline) >= 600, timeout=60, interval=0.2)
        kafka_server.restart()
        wait_for(lambda: done(tmp_path, pipeline, 3000), timeout=120, interval=0.5)
    finally:
        code, _ = stop(run)
    assert code == 0, (tmp_path / "run.log").read_text()[-3000:]
    assert_every_change_once(bootstrap, name, 3000, 20)
    in_sink = jsonl_positions(tmp_path / "out" / "files")
    assert len(in_sink) == len(set(in_sink))
    assert set(in_sink) == log_positions(bootstrap, name)


def test_sigkill_of_the_source_mid_transaction(kafka_server: Any, tmp_path: Path) -> None:
    # Enough changes that the kill lands before the end on a fast, quiet machine too.
    changes = 120_000
    bootstrap = kafka_server.bootstrap_servers
    pipeline, name = write_pipeline(tmp_path, bootstrap, changes=changes, transaction_size=2000)
    topics = [f"{name}.{table}" for table in TABLES]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _ in range(5):
        run = start_run(pipeline, tmp_path, None, "--role", "source")
        try:
            wait_for(lambda: stored_next(tmp_path, pipeline) >= 4000, timeout=60, interval=0.2)
            wait_for(lambda: open_transactions(admin, topics, 3), timeout=30, interval=0)
            run.send_signal(signal.SIGKILL)
            run.wait(10)
        finally:
            if run.poll() is None:
                run.kill()
        # The transaction seen open may have committed just before the kill landed, and the
        # next one produced nothing yet: then kill again, until one dies with records written.
        if open_transactions(admin, topics, 3):
            break
    else:
        pytest.fail("five kills in a row missed an open transaction with records")
    killed_at = stored_next(tmp_path, pipeline)
    assert killed_at < changes
    run = start_run(pipeline, tmp_path, None, "--role", "source")
    try:
        wait_for(lambda: stored_next(tmp_path, pipeline) == changes, timeout=180, interval=0.5)
    finally:
        code, _ = stop(run)
    assert code == 0
    assert_every_change_once(bootstrap, name, changes, 2000)
    # The kill hit an open transaction: its records are in the log, aborted, unseen above.
    committed = sum(len(r) for r in topic_records(bootstrap, name).values())
    assert sum(kcat_count(bootstrap, t, "read_uncommitted") for t in topics) > committed


def test_two_sink_workers_share_partitions_and_one_takes_over(
    kafka_server: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_server.bootstrap_servers
    pipeline, name = write_pipeline(tmp_path, bootstrap, changes=4000, rate=400, partitions=4)
    source = start_run(pipeline, tmp_path, None, "--role", "source")
    first_dir, second_dir = tmp_path / "worker1", tmp_path / "worker2"
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "cdc.cli.main", "sink", str(pipeline), "files"],
            cwd=tmp_path,
            env=cdc_env({"OUT_DIR": str(out)}),
            stdout=(tmp_path / f"{out.name}.log").open("a"),
            stderr=subprocess.STDOUT,
        )
        for out in (first_dir, second_dir)
    ]
    try:
        wait_for(lambda: bool(jsonl_positions(first_dir)), timeout=60, interval=0.2)
        wait_for(lambda: bool(jsonl_positions(second_dir)), timeout=60, interval=0.2)
        split = {(t, p) for t, p, _ in jsonl_positions(first_dir)}
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(10)
        wait_for(lambda: done(tmp_path, pipeline, 4000), timeout=120, interval=0.5)
    finally:
        for process in [source, *workers]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(15)
    second = jsonl_positions(second_dir)
    assert len(second) == len(set(second)), "the surviving worker applied a record twice"
    assert split <= {(t, p) for t, p, _ in second}, "the survivor took over every partition"
    assert set(jsonl_positions(first_dir)) | set(second) == log_positions(bootstrap, name)


def test_postgres_to_kafka_survives_a_sigkill(
    pg_db: str, kafka_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PostgreSQL source on Kafka: SIGKILL mid-workload, restart; the topic's final state
    per key equals the table."""
    from tests.e2e.test_pg_pipeline import _table, _workload, wait_written

    name = f"pgk{uuid.uuid4().hex[:8]}"
    pipeline = tmp_path / "pgk.yaml"
    pipeline.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: postgres\n  dsn: ${{PGK_DSN}}\n"
        "  tables: [public.accounts]\n  snapshot: never\n  status_interval_s: 1\n"
        f"log:\n  type: kafka\n  bootstrap_servers: {kafka_server.bootstrap_servers}\n"
    )
    env = {"PGK_DSN": pg_db}
    monkeypatch.setenv("PGK_DSN", pg_db)  # cdc tail and cdc drop read the file too
    with psycopg.connect(pg_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, note text, balance int)")
    run = start_run(pipeline, tmp_path, env)
    try:
        wait_for(lambda: "source.opened" in (tmp_path / "run.log").read_text(), timeout=60)
        # The workload runs until the kill is done (a loaded machine starts a Kafka producer
        # slowly: a fixed few seconds of writes could end before the run is mid-work).
        done, committed = threading.Event(), [0]
        writer = threading.Thread(
            target=_workload, args=(pg_db, time.monotonic() + 90, 11, done, committed)
        )
        writer.start()
        topic = f"{name}.public.accounts"
        kill_mid_workload(run, writer, pipeline, topic, tmp_path, env)
        wait_written(writer, committed, "writes while it is down")
        run = start_run(pipeline, tmp_path, env)
        opened = lambda: (tmp_path / "run.log").read_text().count("source.opened")  # noqa: E731
        wait_for(lambda: opened() >= 2, timeout=60, process=run)  # the log is appended to
        wait_written(writer, committed, "writes after the restart")
        done.set()
        writer.join()
        expected = _table(pg_db)
        wait_for(
            lambda: latest_per_key(tail_all(pipeline, topic, tmp_path)) == expected,
            timeout=60,
            interval=0.5,
        )
        code, _ = stop(run)
        assert code == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if run.poll() is None:
            stop(run, signal.SIGKILL)
        cdc("drop", str(pipeline), "--yes", cwd=tmp_path, env=env)
