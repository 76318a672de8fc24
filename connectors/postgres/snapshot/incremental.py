"""Read chunks between watermarks while the stream runs (see :mod:`snapshots.watermark`).

One background thread per source: it plans requested tables, then for each chunk writes the low
watermark, reads the chunk, hands the rows to the shared :class:`Watermarks`, writes the high
watermark, and waits until the poll thread has seen that high watermark in the stream before it
reads the next chunk. Only one chunk is in memory at a time, and streaming never waits for a read.
Each read locks its table from before its snapshot until the high watermark is written, and
reads the table's shape at that time (:mod:`.read_shape`): DDL committed since the plan changes
what is read (or, for a new chunk key, the plan), and never fails the request.

A request is the unit that fails or is cancelled, never the stream: a chunk whose read fails
(after a few retries when the error may heal, through :mod:`cdc.support.retry`) marks its
request failed in the stored state, with the reason, and the reader moves on. Chunks are read in
read-only transactions: ``--where`` is the operator's SQL, and it must not write.
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

from cdc.config.batch_bytes import BATCH_BYTES
from cdc.contracts.errors import SourceFatal, SourceUnavailable
from cdc.support.logging import Logger
from cdc.support.retry import Backoff, Decision, Stopped, classify, retry, retry_until_stopped
from connectors.postgres.replication.connection import session_conninfo
from connectors.postgres.snapshot.channel import WATERMARK, Channel
from connectors.postgres.snapshot.parallel import ChunkFailed
from connectors.postgres.snapshot.read_shape import PlanOutdated, Refresh, lock_current
from connectors.postgres.snapshot.reader import chunk_query, read_lines
from connectors.postgres.snapshot.repair import absent_query
from connectors.postgres.snapshot.rows import Gone, KeyedRow, keyed_lines
from connectors.postgres.snapshot.window_rows import ChunkJob
from snapshots.state import SnapshotState
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
#: Rows of COPY lines read at a time (a window holds its whole chunk's rows all the same).
PIECE_ROWS = 5000


class _Racing(Exception):
    """The read's snapshot misses a transaction that committed before the low watermark."""


@dataclass(frozen=True, slots=True)
class Work:
    """Queued work for one request: ``plan`` runs in the reader thread and returns the chunks
    to read (planning reads the table, so it must not hold up the poll thread)."""

    request: str | None
    table: str
    where: str | None
    plan: Callable[[], list[ChunkJob]]
    #: The rest of an initial snapshot (resumed after a crash): its failure stops the run, as
    #: the initial snapshot's always does, instead of being marked failed: all its tables share
    #: one id, and the sinks would otherwise be left without a table's rows for good.
    initial: bool = False
    #: Plans the request afresh (``plan`` itself, when ``None``): a resumed request's ``plan``
    #: reads its stored chunks, which a changed chunk key made useless.
    replan: Callable[[], list[ChunkJob]] | None = None


@dataclass(frozen=True, slots=True)
class OpenWindow:
    """What the poll thread needs when a high watermark closes a window."""

    job: ChunkJob
    done: threading.Event


class WatermarkReader:
    """The background reader.

    A request that fails (after the retries a retriable error gets, see
    :func:`cdc.support.retry.retry_until_stopped`) is marked failed in ``state`` with its reason
    and the reader goes on with the next: an online snapshot never stops the stream. One that
    ended (failed, or cancelled by the poll thread) is read no further.

    Args:
        dsn: the user's DSN (secret).
        connect_timeout_s: connection timeout.
        channel: where watermarks are written (logical messages or the signal table).
        windows: shared with the poll thread, guarded by ``lock``.
        lock: guards ``windows`` and ``open_windows``.
        state: the stored snapshot progress (thread-safe), where requests end.
        logger: bound logger.
        retries: attempts per chunk after the first, for retriable errors.
        backoff_s: the first retry's delay; it doubles with each retry.
        refresh: describes a chunk's table again in each read, once the read holds the
            table's lock, so a schema change since the plan neither fails the read (a renamed
            or dropped column) nor reads the old shape.
        piece_bytes: about the most bytes of COPY lines read at a time (the source's
            ``max_batch_bytes``); a window holds its whole chunk's rows all the same.
    """

    def __init__(
        self,
        dsn: str,
        connect_timeout_s: float,
        channel: Channel,
        windows: Watermarks[KeyedRow],
        lock: threading.Lock,
        state: SnapshotState,
        logger: Logger,
        retries: int = 3,
        backoff_s: float = 0.5,
        refresh: Refresh | None = None,
        piece_bytes: int = BATCH_BYTES,
    ) -> None:
        self._refresh, self._piece_bytes = refresh, piece_bytes
        self._conninfo = session_conninfo(dsn, connect_timeout_s, application_name="cdc-snapshot")
        self._channel, self._windows, self._lock = channel, windows, lock
        self._state, self._logger = state, logger
        self._retries, self._backoff_s = retries, backoff_s
        self.open_windows: dict[str, OpenWindow] = {}
        self._work: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self._marker_conn: psycopg.Connection[Any] | None = None
        self.failure: BaseException | None = None
        #: Called in the reader thread with each chunk's job after its low watermark, before
        #: the read locks the table: a test holds a read there to commit DDL meanwhile.
        self.before_read: Callable[[ChunkJob], None] | None = None
        #: Called likewise once the chunk is read, before its high watermark is written.
        self.before_high: Callable[[ChunkJob], None] | None = None
        self._thread = threading.Thread(target=self._run, name="snapshot-wm", daemon=True)
        self._thread.start()

    def submit(self, work: Work) -> None:
        """Queue ``work``; it is planned and read in the reader thread, in order."""
        self._work.put(work)

    def drop_ended(self) -> None:
        """Abandon the open windows of requests that ended (the poll thread cancelled them):
        their rows are never emitted, and the reader stops waiting for their high watermark."""
        with self._lock:
            for wid, window in list(self.open_windows.items()):
                if self._state.ended(window.job.request):
                    self._windows.abandon(wid)
                    del self.open_windows[wid]
                    window.done.set()

    def close(self) -> None:
        self._stop.set()
        self._work.put(None)
        self._thread.join(timeout=15)
        self._drop_connection()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                work = self._work.get()
                if work is None:
                    return
                self._do(work)
        except Stopped:
            return
        except BaseException as exc:  # not an Exception: the process is going down
            self.failure = exc

    def _do(self, work: Work) -> None:
        if self._state.ended(work.request):
            return
        try:
            jobs: list[ChunkJob] | None = work.plan()
            while jobs is not None:
                jobs = self._read_jobs(work, jobs)
        except Stopped:
            raise
        except Exception as exc:  # whatever it is, it ends this request, never the stream
            if work.initial:
                raise
            self._failed(work, exc)

    def _read_jobs(self, work: Work, jobs: list[ChunkJob]) -> list[ChunkJob] | None:
        """Read ``jobs`` in order; the jobs of a new plan of the request when the table's chunk
        key changed since this one, else ``None``."""
        for job in jobs:
            if self._stop.is_set() or self._state.ended(job.request):
                return None
            try:
                self._chunk(job)
            except PlanOutdated as exc:
                self._logger.warning(
                    "snapshot.replanned", table=work.table, request=work.request, reason=str(exc)
                )
                return (work.replan or work.plan)()
        return None

    def _failed(self, work: Work, exc: Exception) -> None:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        listed = self._state.fail(work.table, work.request, work.where, reason)
        if listed is None:
            return  # cancelled meanwhile
        self._logger.error(
            "snapshot.request_failed",
            table=work.table,
            request=listed,
            where=work.where,
            reason=reason,
            action="the stream goes on; `cdc snapshot FILE --cancel ID` removes the request",
        )

    def _chunk(self, job: ChunkJob) -> None:
        """Read one chunk, retrying what may heal (a lost connection) a bounded number of times.

        Raises:
            ChunkFailed: the chunk cannot be read; the message names it and the reason.
            Stopped: the reader is closing.
        """
        logger = self._logger.bind(table=job.table.name, chunk=job.chunk.index)
        try:
            retry_until_stopped(
                lambda: self._attempt(job),
                self._stop,
                logger,
                "snapshot.chunk_retry",
                Backoff(initial_s=self._backoff_s),
                attempts=self._retries + 1,
            )
        except (Stopped, PlanOutdated):
            raise
        except Exception as exc:
            tried = self._retries + 1 if classify(exc) is Decision.RETRY else 1
            raise ChunkFailed(
                f"incremental snapshot of {job.table.name} failed in chunk {job.chunk.index} "
                f"after {tried} attempt(s): {exc}"
            ) from exc

    def _attempt(self, job: ChunkJob) -> None:
        wid = uuid.uuid4().hex
        try:
            self._read_window(wid, job)
        except BaseException as exc:
            with self._lock:
                self._windows.abandon(wid)
                self.open_windows.pop(wid, None)
            self._drop_connection()
            if isinstance(exc, psycopg.OperationalError):  # the connection, not the query
                raise SourceUnavailable(str(exc)) from exc
            raise

    def _read_window(self, wid: str, job: ChunkJob) -> None:
        done = threading.Event()
        with self._lock:
            # Checked under the lock the poll thread cancels under: a window is either never
            # opened for a cancelled request, or abandoned by drop_ended.
            if self._state.ended(job.request):
                return
            self._windows.expect(wid, job.table.name)
            self.open_windows[wid] = OpenWindow(job, done)
        conn = self._connection()
        self._emit(conn, LOW, wid)
        after_low = self._snapshot_text(conn)
        if self.before_read is not None:
            self.before_read(job)
        self._read_and_mark(conn, OpenWindow(job, done), wid, after_low)
        deadline = time.monotonic() + HIGH_WATERMARK_WAIT_S
        while not done.wait(0.2):
            if self._stop.is_set():
                raise Stopped()
            if time.monotonic() > deadline:
                raise SourceFatal(f"high watermark {wid} never came back through the stream")
        self._clean(conn, wid)

    def _clean(self, conn: psycopg.Connection[Any], wid: str) -> None:
        """Delete the window's watermark rows (signal table); the chunk is done either way."""
        try:
            self._channel.clean(conn, [render(LOW, wid), render(HIGH, wid)])
        except psycopg.Error as exc:
            self._drop_connection()
            self._logger.warning("snapshot.watermark_clean_failed", window=wid, error=str(exc))

    @staticmethod
    def _snapshot_text(conn: psycopg.Connection[Any]) -> str:
        row = conn.execute(sql.SQL("SELECT pg_current_snapshot()::text")).fetchone()
        assert row is not None
        return str(row[0])

    def _read_and_mark(
        self, conn: psycopg.Connection[Any], window: OpenWindow, wid: str, after_low: str
    ) -> None:
        """Read the chunk in the table's shape at read time, hand the rows to the window and
        write its high watermark, all while the read holds the table's lock.

        Why the lock: DDL may commit at any time after the plan (and the low watermark). The
        read takes the table's ACCESS SHARE lock before its snapshot (``LOCK TABLE`` takes
        none), waiting for any DDL under way, and only then describes the table; it keeps the
        lock until the high watermark is written (by another session: this transaction is
        read-only). So the stream shows any DDL either inside the window before the read (the
        rows are in its new shape, and a rewrite such as a type change is not hidden from the
        snapshot) or after the high watermark: the window's rows are in the table's shape at
        their position in the stream, and a column renamed or dropped meanwhile never fails
        the read.

        Why the check: a transaction whose commit record precedes the low watermark's may still
        be leaving the process array when a new snapshot is taken, which would hide it from the
        read although the stream shows it before the window. Such a transaction is in progress
        in the snapshot taken right after the low watermark (``after_low``) and already finished
        in the commit log; the read waits (briefly) until none is left.
        """
        job = window.job

        def read() -> None:
            with conn.transaction():
                # Read-only, as the request's check was: the operator's --where may call
                # functions, and none may write (nextval() would advance once per row).
                conn.execute(sql.SQL("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"))
                current = lock_current(conn, job, self._refresh)
                [(racing,)] = conn.execute(_RACING, (after_low,)).fetchall()
                if racing:
                    raise _Racing
                rows = self._read(conn, current)
                with self._lock:
                    if wid in self.open_windows:  # not abandoned (its request cancelled)
                        # The window's records take the shape of the read.
                        self.open_windows[wid] = OpenWindow(current, window.done)
                    self._windows.deliver(wid, rows)
                del rows  # the window owns the chunk now: it goes once the window closes
                if self.before_high is not None:
                    self.before_high(current)
                self._emit(self._marker_connection(), HIGH, wid)

        try:
            racing = Backoff.fixed(0.002)
            retry(read, lambda exc: isinstance(exc, _Racing), racing, attempts=RACE_RETRIES)
        except _Racing:
            # Retriable: such a transaction leaves the process array soon; a new window sees it.
            raise SourceUnavailable(
                f"transactions before watermark of {job.table.name} stay invisible"
            ) from None

    def _read(self, conn: psycopg.Connection[Any], job: ChunkJob) -> dict[bytes, KeyedRow]:
        state = job.table.state
        rows: dict[bytes, KeyedRow] = {}
        query = chunk_query(job.table, job.chunk, job.where, ordered=True)
        piece_bytes, hides = self._piece_bytes, job.table.hides_values
        for lines in read_lines(conn, query, PIECE_ROWS, hides, piece_bytes):
            for row in keyed_lines(state, lines):
                rows[row[1]] = row
        if job.purge and job.table.where:
            # The same snapshot's rows the filter leaves out (NULL is out too, as in a
            # publication): the sinks may hold them from under the filter before.
            outside = replace(job.table, where=f"({job.table.where}) IS NOT TRUE")
            query = chunk_query(outside, job.chunk, job.where, ordered=True)
            for lines in read_lines(conn, query, PIECE_ROWS, hides, piece_bytes):
                for left_out, key in keyed_lines(state, lines):
                    rows[key] = Gone(left_out, key)
        absent = absent_query(job.table, job.chunk, job.keys)
        if absent is not None:  # cdc verify --repair: keys the sinks hold, the table lacks
            for lines in read_lines(conn, absent, PIECE_ROWS, hides, piece_bytes):
                for gone, key in keyed_lines(state, lines):
                    rows[key] = Gone(gone, key)
        return rows

    def _emit(self, conn: psycopg.Connection[Any], kind: str, wid: str) -> None:
        self._channel.write(conn, WATERMARK, render(kind, wid))

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._conninfo, autocommit=True)
        return self._conn

    def _marker_connection(self) -> psycopg.Connection[Any]:
        """The session that writes high watermarks while the reading one holds its lock."""
        if self._marker_conn is None or self._marker_conn.closed:
            self._marker_conn = psycopg.connect(self._conninfo, autocommit=True)
        return self._marker_conn

    def _drop_connection(self) -> None:
        for conn in (self._conn, self._marker_conn):
            if conn is not None:
                conn.close()
        self._conn = self._marker_conn = None
