"""The hot paths whose work per row is counted, each driven through the real runtime on a fixed
input: the same code ``cdc run`` runs, with its default settings.

- ``stream``: pgoutput bytes to committed embedded-log transactions. The runtime's
  :class:`~cdc.runtime.source_task.SourceTask` polls the ``postgres`` source (snapshot ``never``)
  over a backlog committed before it starts: a 2,000-row INSERT in one transaction, then those
  rows updated in 10 transactions of 200. Counted: every poll that returned something, the
  encoding, the appends, the commits with the offsets and the acks, until the last row is acked.
- ``snapshot``: COPY text to committed chunks. The initial snapshot of a 5,000-row table, its
  reader threads (COPY, rows to records) and the task's thread (pieces to the log, chunk
  progress, commits) from the first poll until the snapshot's last commit is acked; the stream's
  start-up at its end is left out (once per run, not per row).
- ``duckdb``: the DuckDB sink's apply path. The runtime's
  :class:`~cdc.runtime.sink_task.SinkTask` reads 5,000 fixed changes (6,000 records with the
  deletes' tombstones and the schema) from the embedded log and applies them (decode, write,
  flush in one DuckDB transaction with the offsets, commit the consumer offsets); opening and
  closing the DuckDB file is left out.

Every path returns a :class:`~tests.perf.counting.Work` of the calls it counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import structlog

from bench import sinks_duckdb
from cdc.contracts.errors import SourceFatal
from cdc.contracts.events import topic_name
from cdc.contracts.schema import schema_record
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.contracts.source import SourceBatch, SourceContext
from cdc.envelope import encode as envelope
from cdc.log.base import TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_task import SinkTask
from cdc.runtime.source_task import SourceTask
from connectors.postgres import PostgresSourceConfig, drop_replication_objects
from connectors.postgres.snapshot.source import SnapshottingPostgresSource
from connectors.postgres.source import PostgresSource
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig
from tests.perf.counting import CallCounter, Work, steady_process

PIPELINE = "perf"
TABLE = "public.perf"
#: The snapshot's reader threads (:mod:`connectors.postgres.snapshot.parallel`).
READERS = "snapshot-"
#: A measured run that takes longer has hung (the counted runs take seconds).
DEADLINE_S = 300.0

STREAM_DDL = (
    "CREATE TABLE perf (id int8 PRIMARY KEY, name text, amount numeric(12,2),"
    " created timestamptz, flag bool, tags text[])"
)
STREAM_INSERT = (
    "INSERT INTO perf SELECT g, 'name-' || g, g * 1.25, '2024-01-01'::timestamptz + g * interval"
    " '1 s', g % 2 = 0, ARRAY['a', 'b'] FROM generate_series(1, 2000) g"
)
STREAM_UPDATE = "UPDATE perf SET amount = amount + 1, flag = NOT flag WHERE id BETWEEN %s AND %s"
STREAM_ROWS = 4000  # 2,000 inserted, then 2,000 updated in 10 transactions of 200

SNAPSHOT_DDL = (
    "CREATE TABLE perf (id int PRIMARY KEY, name text NOT NULL, amount numeric(12, 2),"
    " created timestamptz, doc jsonb, active bool, qty int)"
)
SNAPSHOT_FILL = (
    "INSERT INTO perf SELECT g, 'customer ' || g, (g % 100000) / 7.0,"
    " '2024-01-01'::timestamptz + g * interval '1 s',"
    " jsonb_build_object('k', g % 10, 'tag', 't' || (g % 7)), g % 2 = 0, g % 1000"
    " FROM generate_series(1, 5000) AS g"
)

SINK_CHANGES = 5000
# The DuckDB sink bench's table and its mix of changes (80% inserts, 15% updates, 5% deletes).
SINK_TABLE, SINK_SCHEMA = sinks_duckdb.TABLE, sinks_duckdb.SCHEMA


# -- the source paths --------------------------------------------------------------------------


def measure_stream(dsn: str, directory: Path) -> Work:
    """Stream the fixed backlog (see the module docstring) into a new embedded log."""
    _execute(dsn, STREAM_DDL)
    config = _source_config(dsn, snapshot="never")
    log = EmbeddedLog(directory / "stream-log")
    try:
        _start_slot(config, log)  # the stream starts from here: the backlog comes next
        _execute(dsn, STREAM_INSERT)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for low in range(1, 2001, 200):
                conn.execute(STREAM_UPDATE, (low, low + 199))
        return _run_source(config, log, lambda _source, rows: rows >= STREAM_ROWS)
    finally:
        log.close()
        drop_replication_objects(config, PIPELINE)


def measure_snapshot(dsn: str, directory: Path) -> Work:
    """The initial snapshot of the fixed table (see the module docstring)."""
    _execute(dsn, SNAPSHOT_DDL, SNAPSHOT_FILL)
    config = _source_config(dsn, snapshot="initial")
    log = EmbeddedLog(directory / "snapshot-log")
    try:
        return _run_source(
            config,
            log,
            lambda source, _rows: source.streaming,
            threads=(READERS,),
            skip=(PostgresSource.open,),
            before_first_poll=_readers_done,
        )
    finally:
        log.close()
        drop_replication_objects(config, PIPELINE)


def _readers_done(wait_s: float = 30.0) -> None:
    """Let the snapshot's readers finish before the first poll (the fixed table's pieces fit
    their queue), so that poll carries the first rows beside the table's schema in every run.
    Whether it does otherwise depends on the clock, and a log append of two topics places its
    records one by one (:meth:`EmbeddedTransaction._by_partition`): 0.4 calls a row more."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not any(t.name.startswith(READERS) for t in threading.enumerate()):
            return
        time.sleep(0.01)


def _source_config(dsn: str, snapshot: str) -> PostgresSourceConfig:
    return PostgresSourceConfig.model_validate(
        {"type": "postgres", "dsn": dsn, "tables": [TABLE], "snapshot": snapshot}
    )


def _start_slot(config: PostgresSourceConfig, log: EmbeddedLog) -> None:
    """Open the source once and close it: its slot and publication exist from this point."""
    source = SnapshottingPostgresSource(config, _context(config, log))
    source.open({})
    source.close()


def _context(config: PostgresSourceConfig, log: EmbeddedLog) -> SourceContext:
    return SourceContext(
        pipeline=PIPELINE,
        log=log,
        logger=structlog.get_logger(),
        snapshot_mode=config.snapshot,
        write_records=True,  # the shipped path: cdc run's source writes its records
    )


Done = Callable[[SnapshottingPostgresSource, int], bool]


def _run_source(
    config: PostgresSourceConfig,
    log: EmbeddedLog,
    done: Done,
    threads: tuple[str, ...] = (),
    skip: tuple[Callable[..., Any], ...] = (),
    before_first_poll: Callable[[], None] = lambda: None,
) -> Work:
    """Run the runtime's source task, counting from its first poll until ``done`` after an ack."""
    stop = threading.Event()
    sessions: list[_MeasuredSource] = []
    with steady_process(), CallCounter(skip, threads) as counter:

        def factory() -> _MeasuredSource:
            if sessions:  # a retried session would count a second start-up: no steady figure
                raise SourceFatal("the measured source task reconnected; see the log above")
            inner = SnapshottingPostgresSource(config, _context(config, log))
            sessions.append(_MeasuredSource(inner, counter, stop, done, before_first_poll))
            return sessions[0]

        SourceTask(PIPELINE, log, factory, stop, structlog.get_logger()).run()
    if not stop.is_set():
        raise AssertionError("the source task ended before the measured run was done")
    return counter.work(sessions[0].rows)


class _MeasuredSource:
    """The source as the task sees it, counting from the first poll: polls that return nothing
    are not counted (how many there are depends on the clock), and after the ack that makes
    ``done`` true the task is stopped."""

    def __init__(
        self,
        inner: SnapshottingPostgresSource,
        counter: CallCounter,
        stop: threading.Event,
        done: Done,
        before_first_poll: Callable[[], None],
    ) -> None:
        self._inner, self._counter, self._stop, self._done = inner, counter, stop, done
        self._before_first_poll: Callable[[], None] | None = before_first_poll
        self._deadline = time.monotonic() + DEADLINE_S
        self.rows = 0

    def tables(self) -> list[tuple[str, str]]:
        return self._inner.tables()

    def open(self, stored_offsets: Mapping[str, Any]) -> None:
        self._inner.open(stored_offsets)

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        if time.monotonic() > self._deadline:
            raise SourceFatal(f"the measured run took over {DEADLINE_S:g} s ({self.rows} rows)")
        if self._before_first_poll is not None:
            self._before_first_poll()
            self._before_first_poll = None
        self._counter.start()
        mark = self._counter.mark()
        batch = self._inner.poll(max_events, timeout_s)
        if batch.empty:
            self._counter.rollback(mark)
        self.rows += len(batch.events) + len(batch.records)
        return batch

    def ack(self, offsets: Mapping[str, Any]) -> None:
        self._inner.ack(offsets)
        if self._counter.counting and self._done(self._inner, self.rows):
            self._counter.stop()
            self._stop.set()

    def close(self) -> None:
        self._inner.close()


def _execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


# -- the sink path ---------------------------------------------------------------------------


def measure_duckdb(directory: Path) -> Work:
    """Apply the fixed changes from an embedded log to a DuckDB file, per record."""
    log = EmbeddedLog(directory / "sink-log")
    try:
        total = _fill_sink_log(log)
        config = DuckDBSinkConfig(name="wh", path=str(directory / "wh.duckdb"))
        stop = threading.Event()
        context = SinkContext(
            PIPELINE, "wh", [SINK_TABLE], SchemaCatalog(log, PIPELINE), structlog.get_logger()
        )
        with steady_process(), CallCounter(skip=(DuckDBSink.open, DuckDBSink.close)) as counter:
            sink = _MeasuredSink(DuckDBSink(config, context), total, stop)
            topics = [topic_name(PIPELINE, *SINK_TABLE)]
            task = SinkTask(PIPELINE, "wh", log, lambda: sink, topics, stop, structlog.get_logger())
            counter.start()
            task.run()
            counter.stop()
        if sink.flushed != total:
            raise AssertionError(f"the sink task applied {sink.flushed} of {total} records")
        return counter.work(total)
    finally:
        log.close()


class _MeasuredSink:
    """The DuckDB sink as the task sees it; stops the task once every record is flushed."""

    reads_schemas = DuckDBSink.reads_schemas

    def __init__(self, inner: DuckDBSink, total: int, stop: threading.Event) -> None:
        self._inner, self._total, self._stop = inner, total, stop
        self._written = 0
        self.flushed = 0

    def open(self) -> None:
        self._inner.open()

    def stored_offsets(self) -> Mapping[TopicPartition, int] | None:
        return self._inner.stored_offsets()

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        self._inner.reset_table(table, partitions)

    def close(self) -> None:
        self._inner.close()

    def write(self, records: Sequence[SinkRecord]) -> None:
        self._inner.write(records)
        self._written += len(records)

    def flush(self) -> None:
        self._inner.flush()
        self.flushed, self._written = self.flushed + self._written, 0
        if self.flushed >= self._total:
            self._stop.set()


def _fill_sink_log(log: EmbeddedLog) -> int:
    """The schema and the fixed changes' records, in one transaction; returns how many."""
    log.ensure_topics([topic_name(PIPELINE, *SINK_TABLE)])
    records = [schema_record(PIPELINE, SINK_SCHEMA)]
    changes = sinks_duckdb.changes(SINK_CHANGES)
    records += [r for e in changes for r in envelope.to_records(e, PIPELINE, 0)]
    tx = log.begin()
    tx.append(records)
    tx.commit()
    return len(records)
