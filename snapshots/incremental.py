"""Read chunks between watermarks while the stream runs (see :mod:`snapshots.watermark`).

One background thread per source: it plans requested tables, then for each chunk writes the low
watermark, reads the chunk, hands the rows to the shared :class:`Watermarks`, writes the high
watermark, and waits until the poll thread has seen that high watermark in the stream before it
reads the next chunk. Only one chunk is in memory at a time, and streaming never waits for a read.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg import sql

from cdc.envelope import record_parts, source_head, to_records
from cdc.errors import CdcError, SourceFatal
from cdc.events import ChangeEvent, EncodedRow, Op, SourceInfo
from cdc.log.base import Record
from cdc.logging import Logger
from connectors.postgres.relations import CONNECTOR
from connectors.postgres.replication import session_conninfo
from snapshots.channel import WATERMARK, Channel
from snapshots.chunks import Chunk
from snapshots.parallel import ChunkFailed
from snapshots.reader import SnapshotTable, chunk_query, read_lines
from snapshots.rows import SEQUENCE_SHIFT, KeyedRow, keyed_lines
from snapshots.watermark import HIGH, LOW, Watermarks, render

#: How long a reader waits for its high watermark to come back through the stream.
HIGH_WATERMARK_WAIT_S = 600.0


#: Transactions in progress right after the low watermark (``%s``), still running in this
#: transaction's snapshot, yet finished in the commit log: committed before the watermark
#: possibly, but not visible yet. The first statement of a transaction takes its snapshot.
_RACING = sql.SQL(
    "SELECT count(*) FROM pg_snapshot_xip(%s::pg_snapshot) AS l(x)"
    " WHERE l.x IN (SELECT pg_snapshot_xip(pg_current_snapshot()))"
    " AND pg_xact_status(l.x) <> 'in progress'"
)
RACE_RETRIES = 2500  # 2 ms apart: about five seconds


class _Racing(Exception):
    """The read's snapshot misses a transaction that committed before the low watermark."""


@dataclass(frozen=True, slots=True)
class ChunkJob:
    """One chunk to read between watermarks."""

    table: SnapshotTable
    chunk: Chunk
    where: str | None


@dataclass(frozen=True, slots=True)
class OpenWindow:
    """What the poll thread needs when a high watermark closes a window."""

    job: ChunkJob
    done: threading.Event


Planner = Callable[[], list[ChunkJob]]
#: The table as the catalog describes it now (columns renamed, added, dropped or retyped since
#: the plan): each chunk is read in the shape of its read.
Refresh = Callable[[SnapshotTable], SnapshotTable]


class WatermarkReader:
    """The background reader.

    Args:
        dsn: the user's DSN (secret).
        connect_timeout_s: connection timeout.
        channel: where watermarks are written (logical messages or the signal table).
        windows: shared with the poll thread, guarded by ``lock``.
        lock: guards ``windows`` and ``open_windows``.
        logger: bound logger.
        retries: attempts per chunk after the first.
        refresh: describes a chunk's table again before each attempt, so a schema change since
            the plan neither fails the read (a renamed column) nor reads the old shape.
    """

    def __init__(
        self,
        dsn: str,
        connect_timeout_s: float,
        channel: Channel,
        windows: Watermarks[KeyedRow],
        lock: threading.Lock,
        logger: Logger,
        retries: int = 3,
        backoff_s: float = 0.5,
        refresh: Refresh | None = None,
    ) -> None:
        self._refresh = refresh
        self._conninfo = session_conninfo(dsn, connect_timeout_s, application_name="cdc-snapshot")
        self._channel, self._windows, self._lock = channel, windows, lock
        self._logger, self._retries, self._backoff_s = logger, retries, backoff_s
        self.open_windows: dict[str, OpenWindow] = {}
        self._work: queue.SimpleQueue[Planner | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="snapshot-wm", daemon=True)
        self._thread.start()

    def submit(self, planner: Planner) -> None:
        """Queue work: ``planner`` runs in the reader thread and returns the chunks to read."""
        self._work.put(planner)

    def close(self) -> None:
        self._stop.set()
        self._work.put(None)
        self._thread.join(timeout=15)
        if self._conn is not None:
            self._conn.close()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                planner = self._work.get()
                if planner is None:
                    return
                for job in planner():
                    if self._stop.is_set():
                        return
                    self._chunk(job)
        except BaseException as exc:
            self.failure = exc

    def _chunk(self, job: ChunkJob) -> None:
        for attempt in range(self._retries + 1):
            wid = uuid.uuid4().hex
            try:
                if self._refresh is not None:
                    job = replace(job, table=self._refresh(job.table))
                if self._read_window(wid, job):
                    return
                return  # stopped
            except (psycopg.Error, CdcError) as exc:
                with self._lock:
                    self._windows.abandon(wid)
                    self.open_windows.pop(wid, None)
                self._drop_connection()
                if attempt >= self._retries or self._stop.is_set():
                    raise ChunkFailed(
                        f"incremental snapshot of {job.table.name} failed in chunk "
                        f"{job.chunk.index} after {self._retries} retries: {exc}"
                    ) from exc
                delay = self._backoff_s * 2**attempt
                self._logger.warning(
                    "snapshot.chunk_retry",
                    table=job.table.name,
                    chunk=job.chunk.index,
                    attempt=attempt + 1,
                    error=str(exc),
                    retry_in_s=delay,
                )
                time.sleep(delay)

    def _read_window(self, wid: str, job: ChunkJob) -> bool:
        done = threading.Event()
        with self._lock:
            self._windows.expect(wid, job.table.name)
            self.open_windows[wid] = OpenWindow(job, done)
        conn = self._connection()
        self._emit(conn, LOW, wid)
        rows = self._rows(conn, job, self._snapshot_text(conn))
        with self._lock:
            self._windows.deliver(wid, rows)
        del rows  # the window owns the chunk now: it goes once the window closes
        self._emit(conn, HIGH, wid)
        deadline = time.monotonic() + HIGH_WATERMARK_WAIT_S
        while not done.wait(0.2):
            if self._stop.is_set():
                return False
            if time.monotonic() > deadline:
                raise SourceFatal(f"high watermark {wid} never came back through the stream")
        self._channel.clean(conn, [render(LOW, wid), render(HIGH, wid)])
        return True

    @staticmethod
    def _snapshot_text(conn: psycopg.Connection[Any]) -> str:
        row = conn.execute(sql.SQL("SELECT pg_current_snapshot()::text")).fetchone()
        assert row is not None
        return str(row[0])

    def _rows(
        self, conn: psycopg.Connection[Any], job: ChunkJob, after_low: str
    ) -> dict[bytes, KeyedRow]:
        """The chunk's rows, read in a snapshot that sees every transaction the stream shows
        before the low watermark.

        Why the check: a transaction whose commit record precedes the low watermark's may still
        be leaving the process array when a new snapshot is taken, which would hide it from the
        read although the stream shows it before the window. Such a transaction is in progress
        in the snapshot taken right after the low watermark (``after_low``) and already finished
        in the commit log; the read waits (briefly) until none is left.
        """
        for _ in range(RACE_RETRIES):
            try:
                with conn.transaction():
                    conn.execute(sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
                    [(racing,)] = conn.execute(_RACING, (after_low,)).fetchall()
                    if racing:
                        raise _Racing
                    return self._read(conn, job)
            except _Racing:
                time.sleep(0.002)
        raise SourceFatal(f"transactions before watermark of {job.table.name} stay invisible")

    def _read(self, conn: psycopg.Connection[Any], job: ChunkJob) -> dict[bytes, KeyedRow]:
        state = job.table.state
        rows: dict[bytes, KeyedRow] = {}
        for lines in read_lines(conn, chunk_query(job.table, job.chunk, job.where), 5000):
            for row in keyed_lines(state, lines):
                rows[row[1]] = row
        return rows

    def _emit(self, conn: psycopg.Connection[Any], kind: str, wid: str) -> None:
        self._channel.write(conn, WATERMARK, render(kind, wid))

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._conninfo, autocommit=True)
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def window_records(
    job: ChunkJob,
    rows: list[KeyedRow],
    *,
    pipeline: str,
    db: str,
    position: int,
    ts_ms: int,
    now_ms: int,
) -> list[Record]:
    """The ``r`` records of a closed window, at the high watermark's position.

    A row the native encoder wrote is put in its envelope around the window's ``source`` head,
    encoded once; any other becomes its event and goes through :func:`cdc.envelope.to_records`.
    """
    info, topic = job.table.info, job.table.state.topic
    base = job.chunk.index << SEQUENCE_SHIFT
    flag = "incremental"
    head = source_head(
        SourceInfo(CONNECTOR, db, info.schema, info.table, ts_ms, position, 0, flag), pipeline
    )
    prefix, middle, tail = record_parts(Op.READ, head, position, position, now_ms)
    key_columns = job.table.state.key
    records = []
    for sequence, (after, key_json) in enumerate(rows, base):
        if isinstance(after, EncodedRow):
            value = b"%b%b%b%d%b" % (prefix, after.json, middle, sequence, tail)
            records.append(Record(topic, key_json, value))
            continue
        key = {k: after[k] for k in key_columns}
        extra = {"lsn": position}
        source = SourceInfo(
            CONNECTOR, db, info.schema, info.table, ts_ms, position, sequence, flag, None, extra
        )
        event = ChangeEvent(Op.READ, key, None, after, source)
        records.extend(to_records(event, pipeline, now_ms))
    return records
