"""Read chunks in parallel inside one exported snapshot.

Each worker opens its own connection, starts a ``REPEATABLE READ`` transaction and imports the
snapshot the replication connection exported (``SET TRANSACTION SNAPSHOT``), so every worker
sees the database exactly as of the slot's consistent point. Workers hand finished pieces to the
poll thread through a bounded queue: when the log falls behind, the workers wait, so memory stays
bounded whatever the table's size.

A chunk that fails is retried with backoff on a fresh connection (possible while the exporting
connection is alive), then the failure is handed to the poll thread, which stops the run.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from cdc.config.batch_bytes import BATCH_BYTES
from cdc.contracts.errors import CdcError, SourceFatal
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.log.base import Record
from cdc.support.logging import Logger
from cdc.support.retry import Backoff, retry
from connectors.postgres.assembly.connect import relation_schemas
from connectors.postgres.lsn import Lsn
from connectors.postgres.replication.connection import session_conninfo
from connectors.postgres.snapshot.reader import SnapshotTable, chunk_query, read_lines
from connectors.postgres.snapshot.rows import Transforms, to_records
from snapshots.chunks import Chunk

RETRIES = 3
BACKOFF_S = 0.5
#: What a chunk read retries on a fresh connection: any error of the server or the log.
_READ_ERRORS = (psycopg.Error, CdcError)


class ChunkFailed(SourceFatal):
    """A chunk could not be read after its retries."""


@dataclass(frozen=True, slots=True)
class Piece:
    """Part of a chunk's rows, as records; ``last`` marks the chunk's final piece."""

    table: str
    chunk: int
    records: list[Record]
    last: bool
    rows: int = 0


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """How the workers connect and shape their output."""

    dsn: str
    connect_timeout_s: float
    pipeline: str
    db: str
    position: int
    ts_ms: int
    piece_rows: int = 5000
    #: About the most bytes of rows a piece holds (the source's ``max_batch_bytes``): the
    #: queue holds ``2 * workers`` pieces, which rows alone bound at 5,000 x the value size.
    piece_bytes: int = BATCH_BYTES
    retries: int = RETRIES
    backoff_s: float = BACKOFF_S
    flag: str = "true"
    #: The pipeline's ``schemas.enable``, for the ``{"schema", "payload"}`` wrapper.
    options: EnvelopeOptions = READABLE
    #: ``source.lsn`` of the rows (the snapshot point; ``position`` is one before it).
    lsn: Lsn | None = None
    #: ``source.txId`` of the rows: the snapshot transaction's id.
    tx_id: int | None = None
    #: The pipeline's transforms, which the rows go through (``None``: none).
    transforms: Transforms | None = None


@dataclass
class _Failure:
    error: BaseException


@dataclass
class _Shared:
    work: queue.SimpleQueue[tuple[SnapshotTable, Chunk]] = field(default_factory=queue.SimpleQueue)
    stop: threading.Event = field(default_factory=threading.Event)


class ExportedSnapshotReader:
    """Workers reading ``work`` inside snapshot ``snapshot_name``.

    Args:
        settings: connection and event settings.
        snapshot_name: what ``CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')`` returned.
        work: ``(table, chunk)`` pairs still to read.
        workers: parallel connections.
        logger: bound logger.
    """

    def __init__(
        self,
        settings: ReadSettings,
        snapshot_name: str,
        work: Sequence[tuple[SnapshotTable, Chunk]],
        workers: int,
        logger: Logger,
    ) -> None:
        self._settings, self._snapshot = settings, snapshot_name
        self._logger = logger
        self._shared = _Shared()
        for item in work:
            self._shared.work.put(item)
        self._out: queue.Queue[Piece | _Failure] = queue.Queue(maxsize=max(2, 2 * workers))
        self._threads = [
            threading.Thread(target=self._worker, name=f"snapshot-{i}", daemon=True)
            for i in range(max(1, min(workers, len(work))))
        ]
        self._alive = len(self._threads)
        self._lock = threading.Lock()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    @property
    def finished(self) -> bool:
        """Every worker exited and every piece was taken."""
        with self._lock:
            return self._alive == 0 and self._out.empty()

    def next(self, timeout_s: float) -> Piece | None:
        """The next piece, or ``None`` after ``timeout_s``.

        Raises:
            ChunkFailed: a chunk failed after its retries.
        """
        try:
            item = self._out.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None
        if isinstance(item, _Failure):
            self._shared.stop.set()
            error = item.error
            if isinstance(error, ChunkFailed):
                raise error
            raise ChunkFailed(f"snapshot worker failed: {error}") from error
        return item

    def close(self) -> None:
        """Stop the workers (they finish their current statement) and wait for them."""
        self._shared.stop.set()
        while True:  # unblock workers waiting on a full queue
            try:
                self._out.get_nowait()
            except queue.Empty:
                break
        for thread in self._threads:
            thread.join(timeout=10)

    # -- worker ----------------------------------------------------------------------------

    def _worker(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            while not self._shared.stop.is_set():
                try:
                    table, chunk = self._shared.work.get_nowait()
                except queue.Empty:
                    return
                conn = self._read_with_retries(conn, table, chunk)
        except BaseException as exc:
            self._put(_Failure(exc))
        finally:
            if conn is not None:
                conn.close()
            with self._lock:
                self._alive -= 1

    def _read_with_retries(
        self, conn: psycopg.Connection[Any] | None, table: SnapshotTable, chunk: Chunk
    ) -> psycopg.Connection[Any]:
        settings = self._settings
        held = [conn]  # the connection a retry reuses: none after a failure

        def attempt() -> psycopg.Connection[Any]:
            current = held[0] = held[0] or self._connect()
            try:
                self._read(current, table, chunk)
            except (psycopg.Error, CdcError):
                current.close()
                held[0] = None
                raise
            return current

        def log(exc: Exception, failures: int, delay: float) -> None:
            self._logger.warning(
                "snapshot.chunk_retry",
                table=table.name,
                chunk=chunk.index,
                attempt=failures,
                error=str(exc),
                retry_in_s=delay,
            )

        try:
            return retry(
                attempt,
                lambda exc: isinstance(exc, _READ_ERRORS) and not self._shared.stop.is_set(),
                Backoff(initial_s=settings.backoff_s, maximum_s=math.inf, jitter=0.0),
                attempts=settings.retries + 1,
                on_retry=log,
            )
        except _READ_ERRORS as exc:
            raise ChunkFailed(
                f"snapshot of {table.name} failed in chunk {chunk.index} after "
                f"{settings.retries} retries: {exc}"
            ) from exc

    def _connect(self) -> psycopg.Connection[Any]:
        settings = self._settings
        conn = psycopg.connect(
            session_conninfo(
                settings.dsn, settings.connect_timeout_s, application_name="cdc-snapshot"
            )
        )
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        # Must be the transaction's first statement: the snapshot is imported before any read.
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(self._snapshot)))
        return conn

    def _read(self, conn: psycopg.Connection[Any], table: SnapshotTable, chunk: Chunk) -> None:
        settings = self._settings
        query = chunk_query(table, chunk, None)
        options = settings.options
        schemas = relation_schemas(table.state, options) if options.schemas_enable else None
        # Closed when the chunk's read stops early (shutdown, a failed piece), before anything
        # else uses or ends the connection: its COPY is then cancelled on the server.
        with closing(
            read_lines(conn, query, settings.piece_rows, table.hides_values, settings.piece_bytes)
        ) as pieces:
            self._put_pieces(table, chunk, pieces, schemas)

    def _put_pieces(
        self, table: SnapshotTable, chunk: Chunk, pieces: Iterable[list[bytes]], schemas: Any
    ) -> None:
        settings, options, count = self._settings, self._settings.options, 0
        for rows in pieces:
            records = to_records(
                table,
                rows,
                pipeline=settings.pipeline,
                db=settings.db,
                position=settings.position,
                chunk=chunk.index,
                first_row=count,
                flag=settings.flag,
                ts_ms=settings.ts_ms,
                now_ms=int(time.time() * 1000),
                schemas=schemas,
                lsn=settings.lsn,
                tx_id=settings.tx_id,
                options=options,
                transforms=settings.transforms,
            )
            count += len(rows)
            if not self._put(Piece(table.name, chunk.index, records, last=False)):
                return
        self._put(Piece(table.name, chunk.index, [], last=True, rows=count))

    def _put(self, item: Piece | _Failure) -> bool:
        while not self._shared.stop.is_set():
            try:
                self._out.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False
