"""The SQLite sink: the current rows of every table, exactly once.

``write`` only buffers. ``flush`` applies the buffered records in one SQLite transaction: the
tables the schema records announce, every change guarded by its source position, and the next
offset of every partition the records came from. The commit makes all of it durable together,
so after a crash the runner resumes from :meth:`SqliteSink.stored_offsets` and no effect is lost
or doubled; and because every change is guarded by its position, even a replay that reaches the
sink past its offsets (another worker, a reset) changes nothing.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from itertools import groupby
from pathlib import Path

from cdc.contracts.errors import CdcError, SinkFatal
from cdc.contracts.schema import is_table_schema_key, schema_topic
from cdc.contracts.sink import SinkContext, SinkRecord, sink_offsets
from cdc.log.base import TopicPartition

from cdc_sink_sqlite import store
from cdc_sink_sqlite.changes import Position, Step, Table, TopicTables, Truncate, Write, plan
from cdc_sink_sqlite.config import SqliteSinkConfig


class SqliteSink:
    """Keeps ``"<schema>.<table>"`` tables of a SQLite file in sync with the source's topics."""

    # The runner also hands this sink the pipeline's schema records (``<pipeline>.__schemas``),
    # so a table the source published without rows is created (empty) all the same.
    reads_schemas = True

    def __init__(self, config: SqliteSinkConfig, context: SinkContext) -> None:
        self._path = Path(config.path)
        self._busy_timeout_s = config.busy_timeout_s
        self._context = context
        self._schema_topic = schema_topic(context.pipeline)
        self._wanted = set(context.tables)
        self._topics = TopicTables(context.pipeline, context.tables)
        self._con: sqlite3.Connection | None = None
        self._pending: list[SinkRecord] = []
        self._offsets: dict[TopicPartition, int] = {}
        self._tables: dict[Table, Position | None] = {}

    def open(self) -> None:
        """Open (or create) the file and read back the offsets stored with the data.

        Raises:
            SinkUnavailable: another connection holds the lock past ``busy_timeout_s``.
            SinkFatal: the file cannot be used (not a database, no permission...).
        """
        try:
            self._con = store.connect(self._path, self._busy_timeout_s)
        except OSError as exc:
            raise SinkFatal(f"SQLite sink: cannot create {self._path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise store.translate(exc, "opening", self._path) from exc
        try:
            with self._transaction("preparing the database") as con:
                store.prepare(con)
        except CdcError:
            self.close()
            raise
        self._context.logger.info("sqlite.opened", path=str(self._path))

    def stored_offsets(self) -> Mapping[TopicPartition, int]:
        return dict(self._offsets)

    def write(self, records: Sequence[SinkRecord]) -> None:
        self._pending.extend(records)

    def flush(self) -> None:
        """Apply everything written since the last flush, with its offsets, in one transaction.

        Raises:
            RecordError: a record this sink cannot apply (nothing of the batch is applied).
            SinkUnavailable: the database is locked or the disk full (the batch is retried).
            SinkFatal: the database cannot be written.
        """
        # Taken at once: after a failure the runner writes the same batch again.
        records, self._pending = self._pending, []
        if not records:
            return
        data = [r for r in records if r.topic != self._schema_topic]
        steps = plan(data, self._topics)
        announced = self._announced(records)
        with self._transaction("applying a batch") as con:
            for table in announced:
                self._create(con, table)
            for table, run in groupby(steps, key=lambda s: s.table):
                self._apply(con, table, list(run))
            store.store_offsets(con, sink_offsets(records))

    def close(self) -> None:
        self._pending = []
        if self._con is not None:
            self._con.close()
            self._con = None

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        """Drop ``table`` with its remembered deletes and truncate position, and store offset 0
        for each of ``partitions``, in one transaction (a crash leaves all or none of it)."""
        with self._transaction(f"resetting {table[0]}.{table[1]}") as con:
            store.drop_table(con, table)
            store.store_offsets(con, dict.fromkeys(partitions, 0))
        self._context.logger.info("sqlite.table_reset", table=f"{table[0]}.{table[1]}")

    # -- internals ---------------------------------------------------------------------------

    def _announced(self, records: Sequence[SinkRecord]) -> list[Table]:
        """This sink's tables that schema records in ``records`` announce, once each."""
        found = [
            (str(r.key.get("schema")), str(r.key.get("table")))
            for r in records
            if r.topic == self._schema_topic
            and r.key is not None
            and r.value is not None
            and is_table_schema_key(r.key)
        ]
        return [t for t in dict.fromkeys(found) if t in self._wanted]

    def _create(self, con: sqlite3.Connection, table: Table) -> None:
        if table not in self._tables:
            store.create_table(con, table)
            self._tables[table] = None

    def _apply(self, con: sqlite3.Connection, table: Table, steps: list[Step]) -> None:
        """A run of one table's steps, in order; writes between truncates go in one call."""
        self._create(con, table)
        for is_truncate, run in groupby(steps, key=lambda s: isinstance(s, Truncate)):
            if is_truncate:
                for truncate in run:
                    store.truncate(con, table, truncate.pos)
                    self._tables[table] = max(truncate.pos, self._tables[table] or (-1, -1))
                continue
            truncated = self._tables[table]
            writes = [s for s in run if isinstance(s, Write)]
            # A change older than the table's last truncate was in the table it emptied.
            if truncated is not None:
                writes = [w for w in writes if w.pos > truncated]
            store.apply_writes(con, table, writes)

    @contextlib.contextmanager
    def _transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; on any error it is rolled back and what this sink keeps in
        memory about the file (offsets, tables) is read again from it."""
        con = self._con
        if con is None:
            raise SinkFatal(f"SQLite sink: {doing} before open")
        try:
            # IMMEDIATE: take the write lock now, so a busy database fails here, not halfway.
            con.execute("BEGIN IMMEDIATE")
            yield con
            con.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback(con)
            raise store.translate(exc, doing, self._path) from exc
        except BaseException:
            self._rollback(con)
            raise
        self._load(con)

    def _rollback(self, con: sqlite3.Connection) -> None:
        with contextlib.suppress(sqlite3.Error):
            if con.in_transaction:
                con.execute("ROLLBACK")
        with contextlib.suppress(sqlite3.Error):
            self._load(con)

    def _load(self, con: sqlite3.Connection) -> None:
        self._offsets = store.load_offsets(con)
        self._tables = store.load_tables(con)
