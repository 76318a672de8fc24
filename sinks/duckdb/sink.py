"""The DuckDB warehouse sink: current state (and optionally history) of every table.

``write`` only buffers. ``flush`` applies the buffered records in one DuckDB transaction (one
per :data:`~sinks.duckdb.plan.TRANSACTION_BYTES` of staged values, for a larger batch): schema
changes, the staged and merged changes of each table, and the next offset of every partition in
``_cdc.offsets``. The commit makes all of it durable together (DuckDB syncs its write-ahead log
on commit), so after a crash the runner resumes from :meth:`DuckDBSink.stored_offsets` and no
effect is lost or doubled. A failing transaction rolls itself back; the ones before it stay,
with their offsets, so the runner's retry of the batch skips their records.

The sink also reads the pipeline's schema topic (``reads_schemas``): a table the source
published but has no rows for (an empty table at the snapshot) is created from its schema.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from cdc.contracts.errors import CdcError, RecordError, SinkFatal
from cdc.contracts.schema import schema_topic
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.log.base import TopicPartition
from sinks.duckdb import catalog, history, merge, position
from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.connection import connect, translate
from sinks.duckdb.errors import named, staging_failed
from sinks.duckdb.evolve import prepare
from sinks.duckdb.plan import TRANSACTION_BYTES, TableBatch, byte_parts, plan
from sinks.duckdb.stage import StageFailed, encode, find_bad_value
from sinks.keyed import TopicTables, split_schemas


class DuckDBSink:
    """Keeps ``"<schema>"."<table>"`` in a DuckDB file in sync with the source's topics."""

    reads_schemas = True

    def __init__(self, config: DuckDBSinkConfig, context: SinkContext) -> None:
        self._config = config
        self._context = context
        self._schema_topic = schema_topic(context.pipeline)
        self._tables = set(context.tables)
        self._topic_tables = TopicTables(context.pipeline, context.tables)
        self._history = config.mode == "history"
        self._con: Any = None
        self._states: dict[tuple[str, str], catalog.TableState] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self._pending: list[SinkRecord] = []
        self._position: str | None = None  # stored with the next flush's offsets
        self._room: int | None = None  # staged bytes the open transaction may still take
        self._log = context.logger

    def open(self) -> None:
        """Open (or create) the file and read back the offsets stored with the data.

        Raises:
            SinkUnavailable: another process holds the file.
            SinkFatal: the file cannot be used.
        """
        config = self._config
        with self._naming():
            self._con = connect(
                Path(config.path), config.threads, config.memory_limit, config.checkpoint_threshold
            )
            try:
                for ddl in (*catalog.META_DDL, position.DDL):
                    self._con.execute(ddl)
                self._load()
            except duckdb.Error as exc:
                self.close()
                raise translate(exc, f"preparing {config.path}") from exc
        self._context.logger.info("duckdb.opened", path=config.path, mode=config.mode)

    def stored_offsets(self) -> Mapping[TopicPartition, int]:
        return dict(self._offsets)

    def write(self, records: Sequence[SinkRecord]) -> None:
        self._pending.extend(records)

    def set_consistent_position(self, position: str) -> None:
        """Store ``position`` with the next flush's offsets, in the last of its transactions
        (:class:`cdc.contracts.sink.PositionedSink`)."""
        self._position = position

    def flush(self) -> None:
        """Apply everything written since the last flush: in one transaction when its staged
        values fit in :data:`~sinks.duckdb.plan.TRANSACTION_BYTES`, else in one a
        :func:`~sinks.duckdb.plan.byte_parts` run.

        Raises:
            RecordError: a record that cannot be applied (nothing of its run is applied).
            SinkFatal: an incompatible schema change or an unusable database.
            SinkUnavailable: a transient DuckDB failure (nothing of the run is applied).
        """
        records, self._pending = self._pending, []
        held, self._position = self._position, None
        if not records and (held is None or not self._offsets):
            return
        if self._con is None:
            raise SinkFatal("DuckDB sink: flush before open")
        try:
            # The batch's size is learnt from the payloads the staging builds anyway: measuring
            # it first (byte_parts) serialised every value once more, a twentieth of the flush.
            self._flush_part(records, held, TRANSACTION_BYTES)
            return
        except _TooBig:  # rolled back before DuckDB staged anything of it
            pass
        parts = byte_parts(records)
        for number, part in enumerate(parts, 1):
            # Only the last transaction holds every change of the batch: it stores the position.
            self._flush_part(records[part], held if number == len(parts) else None)

    def _flush_part(
        self, records: list[SinkRecord], held: str | None = None, room: int | None = None
    ) -> None:
        """Apply ``records`` in one transaction; ``room``: raise :class:`_TooBig` once their
        staged values pass that many bytes (``None``: no limit)."""
        self._room = room
        records, announced, schema_offsets = split_schemas(
            records, self._schema_topic, self._tables
        )
        batches, offsets = plan(records, self._offsets, self._topic_tables)
        offsets.update(schema_offsets)
        with self._naming():
            self._apply_all(batches, offsets, announced, held)
        self._offsets.update(offsets)

    def _apply_all(
        self,
        batches: dict[tuple[str, str], TableBatch],
        offsets: dict[TopicPartition, int],
        announced: Sequence[tuple[str, str]],
        held: str | None = None,
    ) -> None:
        try:
            with self._undone_on_error("applying a batch"):
                self._transaction(batches, offsets, announced, held)
        except _TooBig:
            self._rollback()
            raise
        except StageFailed as failed:
            self._rollback()
            bad = self._diagnose(failed)
            if bad is None:
                named_tables = [f"{s}.{t}" for s, t in batches]
                raise staging_failed(failed.cause, named_tables) from failed.cause
            raise bad from failed.cause

    def close(self) -> None:
        self._pending = []
        if self._con is not None:
            self._con.close()
            self._con = None

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        """Drop ``table``, its deleted keys and its recorded shape, store offset 0 for each of
        ``partitions``, and create the table again, empty, from its latest published schema:
        all in one transaction. A history table is kept, renamed with the time of the reset:
        the compacted log no longer holds every version it recorded.

        Raises:
            SinkFatal: the sink is not open, or DuckDB refused the change.
        """
        if self._con is None:
            raise SinkFatal("DuckDB sink: reset before open")
        with self._naming(), self._undone_on_error(f"resetting {table[0]}.{table[1]}"):
            self._con.execute("BEGIN TRANSACTION")
            self._drop(table)
            topics = sorted({tp.topic for tp in partitions})
            for topic in topics:
                self._con.execute(f"DELETE FROM {catalog.META}.offsets WHERE topic = ?", [topic])
            if partitions:
                values, params = _values({tp: 0 for tp in partitions})
                self._con.execute(f"INSERT INTO {catalog.META}.offsets VALUES {values}", params)
            self._states.pop(table, None)
            self._create_announced(table)
            position.forget(self._con)  # the table is read again from its start
            self._con.execute("COMMIT")
        self._load()
        self._log.info("duckdb.table_reset", table=f"{table[0]}.{table[1]}")

    # -- internals ---------------------------------------------------------------------------

    def _load(self) -> None:
        self._states = catalog.load_states(self._con)
        self._offsets = {
            TopicPartition(topic, int(partition)): int(offset)
            for topic, partition, offset in self._con.execute(
                f"SELECT topic, partition, next_offset FROM {catalog.META}.offsets"
            ).fetchall()
        }

    def _create_announced(self, table: tuple[str, str]) -> None:
        """Create ``table`` from its published schema if the sink holds none yet.

        A schema without key columns is left for the first row (whose key names the columns).
        """
        if table in self._states:
            return
        published = self._context.schemas.get(*table)
        if published is None or not published.key_columns:
            return
        prepare(self._con, self._states, table, published, [], self._history, self._log)

    def _drop(self, table: tuple[str, str]) -> None:
        state = self._states.get(table) or catalog.TableState(*table, "typed")
        self._con.execute(f"DROP TABLE IF EXISTS {state.target}")
        self._con.execute(f"DROP TABLE IF EXISTS {state.deleted}")
        if state.history:
            history.keep_before_reset(self._con, state)
        for meta in ("tables", "columns"):
            self._con.execute(
                f"DELETE FROM {catalog.META}.{meta} WHERE schema_name = ? AND table_name = ?",
                list(table),
            )

    def _transaction(
        self,
        batches: dict[tuple[str, str], TableBatch],
        offsets: dict[TopicPartition, int],
        announced: Sequence[tuple[str, str]] = (),
        held: str | None = None,
    ) -> None:
        self._con.execute("BEGIN TRANSACTION")
        for table in announced:
            self._create_announced(table)
        for batch in batches.values():
            self._apply(batch)
        self._store_offsets(offsets)
        if held is not None:
            position.store(self._con, held)
        self._con.execute("COMMIT")

    def _store_offsets(self, offsets: dict[TopicPartition, int]) -> None:
        # UPDATE for known partitions: a quarter of the cost of INSERT OR REPLACE, which
        # deletes and re-inserts through the primary-key index.
        known = {tp: o for tp, o in offsets.items() if tp in self._offsets}
        new = {tp: o for tp, o in offsets.items() if tp not in self._offsets}
        if known:
            values, params = _values(known)
            self._con.execute(
                f"UPDATE {catalog.META}.offsets AS o SET next_offset = v.n FROM (VALUES {values}) "
                "AS v(t, p, n) WHERE o.topic = v.t AND o.partition = v.p",
                params,
            )
        if new:
            values, params = _values(new)
            self._con.execute(f"INSERT INTO {catalog.META}.offsets VALUES {values}", params)

    def _apply(self, batch: TableBatch) -> None:
        key_names = list(batch.keys[0]) if len(batch) else []
        published = self._context.schemas.get(*batch.table)
        state = prepare(
            self._con, self._states, batch.table, published, key_names, self._history, self._log
        )
        truncate = batch.truncate
        applied = truncate is not None and merge.apply_truncate(self._con, state, truncate)
        if applied:
            self._log.info("duckdb.truncated", table=state.target, pos=list(state.watermark))
        if applied and truncate is not None and self._history:
            history.close_truncated(self._con, state, truncate)
        if not len(batch):
            return
        hidden = self._context.hidden.get(batch.table, frozenset())
        staged = encode(state, batch, not self._history, self._context.envelope, hidden)
        if self._room is not None:
            self._room -= staged.size
            if self._room < 0:
                raise _TooBig
        merge.select_winners(self._con, state, staged, newest_only=not self._history)
        latest = merge.select_latest(self._con, state) if self._history else merge.WINNERS
        ops = set(staged.batch.ops)
        merge.merge_current(self._con, state, latest, upserts=ops != {"d"}, deletes="d" in ops)
        if self._history:
            history.append_versions(self._con, state)

    def _diagnose(self, failed: StageFailed) -> RecordError | None:
        try:
            return find_bad_value(self._con, failed)
        except duckdb.Error:
            return None  # not a value's fault: the original error is reported

    @contextlib.contextmanager
    def _naming(self) -> Iterator[None]:
        """A fatal error names this sink, and the sink in the command of its fix."""
        try:
            yield
        except SinkFatal as exc:
            if type(exc) is not SinkFatal:
                raise
            raise named(exc, self._context.sink_name) from exc

    @contextlib.contextmanager
    def _undone_on_error(self, doing: str) -> Iterator[None]:
        """Roll the open transaction back on any error; a DuckDB error is translated."""
        try:
            yield
        except CdcError:
            self._rollback()
            raise
        except duckdb.Error as exc:
            self._rollback()
            raise translate(exc, doing) from exc

    def _rollback(self) -> None:
        """Undo the open transaction and forget in-memory table state it changed."""
        # No transaction may be open: it failed before BEGIN, or DuckDB already ended it.
        with contextlib.suppress(duckdb.Error):
            self._con.execute("ROLLBACK")
        self._load()


class _TooBig(Exception):
    """A transaction's staged values passed its room: the batch is applied in byte parts."""


def _values(offsets: dict[TopicPartition, int]) -> tuple[str, list[Any]]:
    """A ``VALUES`` list of ``(topic, partition, next offset)`` and its parameters."""
    values = ", ".join("(?, ?, ?)" for _ in offsets)
    return values, [v for tp, offset in offsets.items() for v in (tp.topic, tp.partition, offset)]
