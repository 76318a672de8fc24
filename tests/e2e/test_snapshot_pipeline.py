"""Snapshots through ``cdc run`` on a real PostgreSQL 15 and the embedded log: under concurrent
writes, across a SIGKILL, and re-snapshotted online with ``cdc snapshot``. Each ends with the
exactness check: the latest record per key in the topic equals the table."""

from __future__ import annotations

import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.config.pipeline import load
from cdc.contracts.errors import SourceFatal
from cdc.log.embedded import EmbeddedLog
from cdc.testing import wait_until
from connectors.postgres import drop_replication_objects
from tests.e2e.cli_helpers import cdc, start_run, stop
from tests.e2e.snapshot_helpers import (
    PIPELINE,
    TOPIC,
    Writer,
    chunks_done,
    compacted_keys,
    create_table,
    key_index_present,
    kill_after_chunks,
    marker_lsn,
    run_log_events,
    snapshot_tables,
    stored_lsn,
    table_state,
    topic_state,
    write_pipeline,
)


def drop_objects(pipeline: Path, *processes: subprocess.Popen[str]) -> None:
    """Teardown: kill what still runs, then drop the slot (once its walsender has let go)."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(10)

    def dropped() -> bool:
        drop_replication_objects(load(str(pipeline)).source, PIPELINE)  # type: ignore[arg-type]
        return True

    # SourceFatal: the slot is still active, until its walsender has let go.
    wait_until(dropped, 20, 0.5, describe="the slot to be dropped", ignore=(SourceFatal,))


def settle_and_stop(process: object, dsn: str, log_dir: Path) -> None:
    """Wait until everything committed so far is in the log, then stop ``cdc run`` cleanly."""
    target = marker_lsn(dsn)
    wait_until(lambda: stored_lsn(log_dir) >= target, 90, 0.25, describe="the stream to catch up")
    code, _ = stop(process)  # type: ignore[arg-type]
    assert code == 0


@dataclass
class SnapshotRecords:
    """The snapshot (``r``) records left in the topic's one partition, by offset, and the
    offset of the first record after the snapshot's (a streamed change or the end)."""

    sources: dict[int, dict[str, Any]]
    end: int


def snapshot_sources(log_dir: Path) -> SnapshotRecords:
    """``source`` of every snapshot (``r``) record left in the topic, by offset."""
    log = EmbeddedLog(log_dir)
    sources: dict[int, dict[str, Any]] = {}
    end: int | None = None
    try:
        [partition] = log.end_offsets(TOPIC)
        offset = 0
        while records := log.read(TOPIC, partition, offset, 20_000):
            for record in records:
                value = orjson.loads(record.value) if record.value is not None else None
                if value is not None and value["op"] == "r":
                    sources[record.offset] = value["source"]
                elif end is None:
                    end = record.offset
            offset = records[-1].offset + 1
        return SnapshotRecords(sources, log.end_offsets(TOPIC)[partition] if end is None else end)
    finally:
        log.close()


def assert_debezium_markers(snapshot: SnapshotRecords, rows: int) -> None:
    """One table: ``first`` on the first row to reach the log, ``last`` on the last one,
    ``true`` on the rest (Debezium's); every row at the snapshot point, with the snapshot
    transaction's id.

    The snapshot's ``rows`` rows take the offsets from 0 to ``rows - 1``, and streaming starts
    after them, but the embedded log compacts as it goes: a row whose key the writer changed
    later may be gone, the first or the last one too, and so may the first streamed changes (so
    the first streamed record left is no bound: CI once found it one past a gap, and took the
    last row for an inner one). So the first and the last are checked where they are still
    there, and a missing one must be missing from the topic (an offset is never reused, so a gap
    is a record compaction removed).
    """
    sources = snapshot.sources
    first, last = 0, rows - 1
    assert snapshot.end >= rows  # no streamed change among the snapshot's offsets
    inner = {o: s["snapshot"] for o, s in sources.items() if o not in (first, last)}
    assert set(inner.values()) == {"true"}, Counter(inner.values())
    assert first not in sources or sources[first]["snapshot"] == "first"
    assert last not in sources or sources[last]["snapshot"] == "last"
    assert max(sources) <= last  # no snapshot row after the stream began
    values = list(sources.values())
    assert len({(s["txId"], s["lsn"], s["sequence"]) for s in values}) == 1
    source = values[0]
    assert isinstance(source["txId"], int) and source["txId"] > 0
    assert source["sequence"] == f'[null,"{source["lsn"]}"]'


def snapshot_finished(log_dir: Path) -> bool:
    tables = snapshot_tables(log_dir)
    return bool(tables) and all(len(chunks_done(t)) == t["chunks_total"] for t in tables.values())


@pytest.mark.pgcore
def test_initial_snapshot_of_300k_rows_under_1000_changes_per_second(
    pg_db: str, tmp_path: Path
) -> None:
    create_table(pg_db, 300_000)
    pipeline = write_pipeline(tmp_path, pg_db, snapshot_chunk_rows=25_000)
    log_dir = tmp_path / "log"
    runs: list[subprocess.Popen[str]] = []
    try:
        with Writer(pg_db, 300_000, rate=1000) as writer:
            process = start_run(pipeline, tmp_path)
            runs.append(process)
            wait_until(lambda: snapshot_finished(log_dir), 240, 0.25, describe="the snapshot")
            during = writer.changes
            wait_until(
                lambda: writer.changes > during + 2000,
                30,
                0.25,
                describe="changes after the snapshot",
            )
        assert during > 1000  # the writer ran while the snapshot was read
        settle_and_stop(process, pg_db, log_dir)
        in_topic, in_table = topic_state(log_dir), table_state(pg_db)
        assert in_topic.keys() == in_table.keys()
        assert in_topic == in_table
        [entry] = snapshot_tables(log_dir).values()
        assert entry["rows"] >= 299_000  # the snapshot read the table, not only the stream
        assert len(run_log_events(tmp_path, "snapshot.chunk_done")) == entry["chunks_total"]
        assert_debezium_markers(snapshot_sources(log_dir), entry["rows"])
        assert key_index_present(log_dir)  # dropped for the snapshot, built at its end
    finally:
        drop_objects(pipeline, *runs)


def test_sigkill_mid_snapshot_resumes_without_rereading_finished_chunks(
    pg_db: str, tmp_path: Path
) -> None:
    # 120 chunks: at 60,000+ rows/s a smaller table was read whole before the kill landed.
    create_table(pg_db, 300_000)
    pipeline = write_pipeline(tmp_path, pg_db, snapshot_chunk_rows=2_500, snapshot_workers=1)
    log_dir = tmp_path / "log"
    runs: list[subprocess.Popen[str]] = []
    try:
        with Writer(pg_db, 300_000, rate=300):
            process = start_run(pipeline, tmp_path)
            runs.append(process)
            kill_after_chunks(process, log_dir)
            assert not key_index_present(log_dir)  # the snapshot wrote without it
            entry = snapshot_tables(log_dir)["public.t"]
            done_before = chunks_done(entry)
            assert entry["chunks_total"] >= 20
            assert 0 < len(done_before) < entry["chunks_total"]
            first_run = len(run_log_events(tmp_path, "snapshot.chunk_done"))
            process = start_run(pipeline, tmp_path)
            runs.append(process)
            wait_until(
                lambda: snapshot_finished(log_dir), 120, 0.25, describe="the resumed snapshot"
            )
        settle_and_stop(process, pg_db, log_dir)
        resumed = run_log_events(tmp_path, "snapshot.chunk_done")[first_run:]
        reread = {e["chunk"] for e in resumed} & done_before
        assert not reread, f"finished chunks read again: {sorted(reread)}"
        assert {e["chunk"] for e in resumed} | done_before == set(range(entry["chunks_total"]))
        assert all(e["kind"] == "initial" for e in resumed)
        decisions = run_log_events(tmp_path, "snapshot.decision")
        assert decisions[-1]["action"] == "resume"
        assert topic_state(log_dir) == table_state(pg_db)
        # The next compaction pass builds the index the killed snapshot left missing, and
        # keeps one record a key (deleted keys: their tombstone): the snapshot's rows that the
        # writer's changes superseded go.
        records, keys = compacted_keys(log_dir)
        assert records == keys >= len(table_state(pg_db))
        assert key_index_present(log_dir)
        assert topic_state(log_dir) == table_state(pg_db)
    finally:
        drop_objects(pipeline, *runs)


def test_cdc_snapshot_resnapshots_a_table_while_streaming_and_writing(
    pg_db: str, tmp_path: Path
) -> None:
    create_table(pg_db, 30_000)
    pipeline = write_pipeline(tmp_path, pg_db, snapshot="never", snapshot_chunk_rows=3_000)
    log_dir = tmp_path / "log"
    runs: list[subprocess.Popen[str]] = []
    try:
        process = start_run(pipeline, tmp_path)
        runs.append(process)
        wait_until(
            lambda: bool(run_log_events(tmp_path, "source.streaming")),
            60,
            0.25,
            describe="streaming",
        )
        with Writer(pg_db, 30_000, rate=500) as writer:
            result = cdc(
                "snapshot",
                str(pipeline),
                "--table",
                "public.t",
                "--wait",
                "--timeout-s",
                "120",
                cwd=tmp_path,
            )
            assert result.returncode == 0, result.stderr
            assert "done" in result.stdout
            assert writer.changes > 0
        settle_and_stop(process, pg_db, log_dir)
        assert topic_state(log_dir) == table_state(pg_db)
        entry = snapshot_tables(log_dir)["public.t"]
        assert entry["kind"] == "incremental"
        assert len(chunks_done(entry)) == entry["chunks_total"] >= 10
        status = cdc("status", str(pipeline), "--json", cwd=tmp_path)
        assert f'"chunks_done": {entry["chunks_total"]}' in status.stdout
    finally:
        drop_objects(pipeline, *runs)


def test_cdc_snapshot_refuses_bad_input(pg_db: str, tmp_path: Path) -> None:
    create_table(pg_db, 10)
    pipeline = write_pipeline(tmp_path, pg_db)
    unknown = cdc("snapshot", str(pipeline), "--table", "public.nope", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "public.nope" in unknown.stderr
    bad = cdc(
        "snapshot", str(pipeline), "--table", "public.t", "--where", "id > 1; x", cwd=tmp_path
    )
    assert bad.returncode == 2
    assert "--where" in bad.stderr
    rejected = cdc(
        "snapshot", str(pipeline), "--table", "public.t", "--where", "nope > 1", cwd=tmp_path
    )
    assert rejected.returncode == 2
    assert "rejects" in rejected.stderr
