"""A sink task's read after its values grew, against a real PostgreSQL 15, the embedded log and
a real sink (JSON lines): the task has read small values (its count grew to ``batch_records``),
then a transaction of 100 kB values arrives, and even its first read of them holds about
``batch_bytes`` (the log's consumer stops at the byte bound), not the count the small ones
allowed."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
import structlog

from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.testing import wait_until
from sinks.jsonl.config import JsonlSinkConfig
from sinks.jsonl.sink import JsonlSink
from tests.integration.pg_source_kit import PIPELINE, Harness, harness, sql

SMALL, LARGE = 500, 30
VALUE = 100_000  # bytes of each large row: incompressible md5 text, TOASTed
MAX_BYTES = 1024 * 1024
TOPIC = f"{PIPELINE}.public.grow"


class _Watched(JsonlSink):
    """The real JSON-lines sink, noting each batch the task hands it: (records, value bytes)."""

    batches: list[tuple[int, int]] = []

    def write(self, records: Sequence[SinkRecord]) -> None:
        size = sum(len(orjson.dumps(r.value)) for r in records)
        type(self).batches.append((len(records), size))
        super().write(records)


def _stream(h: Harness, events: int) -> None:
    """Step the source until ``events`` arrived and a new transaction of them is committed."""
    deadline, before = time.monotonic() + 60, len(h.commits)
    while len(h.events) < events or len(h.commits) == before:
        assert time.monotonic() < deadline, len(h.events)
        h.step(timeout_s=0.5)


def _applied(h: Harness, records: int, thread: threading.Thread) -> None:

    def applied() -> bool:
        if sum(h.log.committed_offsets(group_name(PIPELINE, "files")).values()) >= records:
            return True
        assert thread.is_alive(), _Watched.batches
        return False

    wait_until(applied, 60, describe=lambda: f"{records} records applied ({_Watched.batches})")


def _task(h: Harness, tmp_path: Path, stop: threading.Event) -> SinkTask:
    config = JsonlSinkConfig(name="files", path=str(tmp_path / "out"))
    context = SinkContext(
        pipeline=PIPELINE,
        sink_name="files",
        tables=[("public", "grow")],
        schemas=SchemaCatalog(h.log, PIPELINE),
        logger=structlog.get_logger(),
    )
    return SinkTask(
        PIPELINE,
        "files",
        h.log,
        lambda: _Watched(config, context),
        [TOPIC],
        stop,
        structlog.get_logger(),
        max_records=1000,
        max_bytes=MAX_BYTES,
    )


@pytest.mark.pgcore
def test_the_first_read_after_values_grew_holds_about_the_byte_bound(
    pg_db: str, tmp_path: Path
) -> None:
    sql(pg_db, "CREATE TABLE grow (id int PRIMARY KEY, payload text)")
    with harness(pg_db, tmp_path / "log", ["public.grow"], max_batch_bytes=MAX_BYTES) as h:
        h.open()
        sql(pg_db, f"INSERT INTO grow SELECT g, 's' FROM generate_series(1, {SMALL}) g")
        _stream(h, SMALL)
        _Watched.batches = []
        stop = threading.Event()
        task = _task(h, tmp_path, stop)
        thread = threading.Thread(target=task.run)
        thread.start()
        try:
            _applied(h, SMALL, thread)
            assert task.read_size.count == 1000  # small values: the count alone bounds a read
            small_batches = len(_Watched.batches)
            sql(
                pg_db,
                f"""INSERT INTO grow SELECT g, (SELECT string_agg(md5(g::text || '.' || i), '')
                    FROM generate_series(1, {VALUE // 32}) i)
                    FROM generate_series({SMALL + 1}, {SMALL + LARGE}) g""",
            )
            _stream(h, SMALL + LARGE)
            _applied(h, SMALL + LARGE, thread)
        finally:
            stop.set()
            thread.join(10)
        lines = (tmp_path / "out" / f"{TOPIC}.jsonl").read_bytes().splitlines()
    ids = [orjson.loads(line)["value"]["after"]["id"] for line in lines]
    assert ids == list(range(1, SMALL + LARGE + 1))
    grown = _Watched.batches[small_batches:]
    # Without the consumer's byte bound the first of these read all 30 (3 MB) at once.
    assert grown and all(n <= MAX_BYTES // VALUE + 1 for n, _ in grown), grown
    assert sum(n for n, _ in grown) == LARGE
