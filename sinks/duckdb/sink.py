"""The DuckDB warehouse sink: current state (and optionally history) of every table.

``write`` only buffers. ``flush`` applies the buffered records in one DuckDB transaction: schema
changes, the staged and merged changes of each table, and the next offset of every partition in
``_cdc.offsets``. The commit makes all of it durable together (DuckDB syncs its write-ahead log
on commit), so after a crash the runner resumes from :meth:`DuckDBSink.stored_offsets` and no
effect is lost or doubled. A failing flush rolls everything back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from cdc.errors import CdcError, RecordError, SinkFatal
from cdc.log.base import TopicPartition
from cdc.sink import SinkContext, SinkRecord
from sinks.duckdb import catalog, history, merge
from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.connection import connect, translate
from sinks.duckdb.evolve import prepare
from sinks.duckdb.plan import TableBatch, plan
from sinks.duckdb.stage import StageFailed, encode, find_bad_value


class DuckDBSink:
    """Keeps ``"<schema>"."<table>"`` in a DuckDB file in sync with the source's topics."""

    def __init__(self, config: DuckDBSinkConfig, context: SinkContext) -> None:
        self._config = config
        self._context = context
        self._history = config.mode == "history"
        self._con: Any = None
        self._states: dict[tuple[str, str], catalog.TableState] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self._pending: list[SinkRecord] = []
        self._log = context.logger

    def open(self) -> None:
        """Open (or create) the file and read back the offsets stored with the data.

        Raises:
            SinkUnavailable: another process holds the file.
            SinkFatal: the file cannot be used.
        """
        config = self._config
        self._con = connect(Path(config.path), config.threads, config.memory_limit)
        try:
            for ddl in catalog.META_DDL:
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

    def flush(self) -> None:
        """Apply everything written since the last flush in one transaction.

        Raises:
            RecordError: a record that cannot be applied (nothing of the batch is applied).
            SinkFatal: an incompatible schema change or an unusable database.
            SinkUnavailable: a transient DuckDB failure (nothing of the batch is applied).
        """
        records, self._pending = self._pending, []
        if not records:
            return
        if self._con is None:
            raise SinkFatal("DuckDB sink: flush before open")
        batches, offsets = plan(records, self._offsets)
        try:
            self._transaction(batches, offsets)
        except StageFailed as failed:
            self._rollback()
            bad = self._diagnose(failed)
            if bad is None:
                raise translate(failed.cause, "staging a batch") from failed.cause
            raise bad from failed.cause
        except CdcError:
            self._rollback()
            raise
        except duckdb.Error as exc:
            self._rollback()
            raise translate(exc, "applying a batch") from exc
        self._offsets.update(offsets)

    def close(self) -> None:
        self._pending = []
        if self._con is not None:
            self._con.close()
            self._con = None

    # -- internals ---------------------------------------------------------------------------

    def _load(self) -> None:
        self._states = catalog.load_states(self._con)
        self._offsets = {
            TopicPartition(topic, int(partition)): int(offset)
            for topic, partition, offset in self._con.execute(
                f"SELECT topic, partition, next_offset FROM {catalog.META}.offsets"
            ).fetchall()
        }

    def _transaction(
        self, batches: dict[tuple[str, str], TableBatch], offsets: dict[TopicPartition, int]
    ) -> None:
        self._con.execute("BEGIN TRANSACTION")
        for batch in batches.values():
            self._apply(batch)
        self._store_offsets(offsets)
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
        staged = encode(state, batch, newest_only=not self._history)
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

    def _rollback(self) -> None:
        """Undo the open transaction and forget in-memory table state it changed."""
        # No transaction may be open: it failed before BEGIN, or DuckDB already ended it.
        with contextlib.suppress(duckdb.Error):
            self._con.execute("ROLLBACK")
        self._load()


def _values(offsets: dict[TopicPartition, int]) -> tuple[str, list[Any]]:
    """A ``VALUES`` list of ``(topic, partition, next offset)`` and its parameters."""
    values = ", ".join("(?, ?, ?)" for _ in offsets)
    return values, [v for tp, offset in offsets.items() for v in (tp.topic, tp.partition, offset)]
