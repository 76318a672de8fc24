"""The Iceberg sink: buffers changes and commits them in batches, each table's commit carrying
the consumed offsets of that table's topic in its snapshot summary.

Checkpoint (:mod:`cdc.runtime.sink_task`): the runner calls ``flush`` after every batch and
then commits the group's offsets; this sink commits to Iceberg only every
``commit_interval_s`` or ``max_rows``, so the group's offsets can run ahead of the tables.
That is safe because the runner starts from :meth:`IcebergSink.stored_offsets`, the offsets of
the tables' last commits, wherever it has one, and a partition new to the tables forces a
commit at once, so every partition the sink ever buffered has one. A crash between two tables'
commits leaves each table at its own offsets, and the topics of two tables never share a
partition: each resumes exactly after its last commit. A failed commit keeps the buffer, and
records handed in again (the runner retries the batch) are skipped by offset; but a record the
table cannot hold leaves it (the runner dead-letters it or stops), and the next commit's offsets
pass it.

While idle, the runner asks :meth:`IcebergSink.probe` every few seconds: buffered changes
whose interval has passed are committed then, not at the next change.

The consistent position (:class:`cdc.contracts.sink.PositionedSink`) the runner hands before a
batch covers every record written so far, that batch included; buffered ones are not in the
tables yet. So the sink holds it, across flushes that commit nothing, until a commit leaves
nothing buffered: then, after every table's commit succeeded, it stores it in its namespace's
properties (:mod:`sinks.iceberg.position`). A flush with nothing buffered stores it at once
(the tables hold every record written). It never leads the tables; a crash between the
commits and its write leaves the older one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import CommitFailedException, NamespaceAlreadyExistsError
from pyiceberg.table import Table as IcebergTable

from cdc.contracts.errors import CdcError, RecordError, SinkFatal, SinkUnavailable
from cdc.contracts.sink import SinkContext, SinkRecord, sink_offsets
from cdc.log.base import TopicPartition
from sinks.iceberg import apply, position, tables
from sinks.iceberg.config import IcebergSinkConfig
from sinks.keyed import Pos, Table, TopicTables


class IcebergSink:
    """Keeps ``<namespace>.<table>`` Iceberg tables in sync with the source's topics."""

    def __init__(self, config: IcebergSinkConfig, context: SinkContext) -> None:
        self._config = config
        self._context = context
        self._namespace = config.namespace_for(context.pipeline)
        self._topics = TopicTables(context.pipeline, context.tables)
        self._catalog: Catalog | None = None
        self._tables: dict[Table, IcebergTable] = {}
        self._shapes: dict[Table, Any] = {}
        self._offsets: dict[TopicPartition, int] = {}  # committed to the tables
        self._seen: dict[TopicPartition, int] = {}  # committed or buffered
        self._truncated: dict[Table, Pos | None] = {}
        self._pending: dict[Table, list[SinkRecord]] = {}
        self._dropped: dict[Table, dict[TopicPartition, int]] = {}  # past bad records
        self._since: float | None = None
        self._fresh = False
        self._flushed = True  # every record written was handed to a flush that returned
        self._position_key = position.key(context.pipeline, config.name)
        self._held: str | None = None  # stored once nothing written before it is buffered
        self._position_failing = False
        self._log = context.logger

    def open(self) -> None:
        """Load the catalog, make the namespace and read each table's stored offsets.

        Raises:
            SinkUnavailable: the catalog cannot be reached now.
            SinkFatal: it refuses the sink (a bad catalog configuration, no permission).
        """
        with self._translated("opening the catalog"):
            self._catalog = open_catalog(self._config)
            with contextlib.suppress(NamespaceAlreadyExistsError):
                self._catalog.create_namespace_if_not_exists(self._namespace)
            self._load()
        self._log.info("iceberg.opened", catalog=self._config.where(), namespace=self._namespace)

    def stored_offsets(self) -> Mapping[TopicPartition, int]:
        """The offsets of the tables' last commits, read again: another worker of this sink
        (on Kafka) may have moved a partition on before it was assigned here."""
        if self._catalog is not None:
            with self._translated("reading the offsets"):
                self._load()
        return dict(self._offsets)

    def durable_offsets(self) -> Mapping[TopicPartition, int]:
        """What the tables hold: the runner commits the group no further, while later records
        wait in the buffer for their commit (:meth:`cdc.contracts.sink.Sink.durable_offsets`)."""
        return dict(self._offsets)

    def write(self, records: Sequence[SinkRecord]) -> None:
        self._flushed = False
        seen = self._seen
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            if record.offset < seen.get(tp, 0):
                continue  # buffered or committed already: the runner retries a failed batch
            seen[tp] = record.offset + 1
            # No commit stored this partition yet, so the runner would start it from the
            # group's offset: the next flush commits, and the tables' offsets cover it.
            self._fresh = self._fresh or tp not in self._offsets
            self._pending.setdefault(self._topics.table(record.topic), []).append(record)
            if self._since is None:
                self._since = time.monotonic()

    def set_consistent_position(self, position: str) -> None:
        """Hold ``position`` until the tables hold every record written before it (see the
        module docstring; :class:`cdc.contracts.sink.PositionedSink`)."""
        self._held = position

    def flush(self) -> None:
        """Commit the buffered changes when due (see the module docstring); with nothing
        buffered, store the held position alone.

        Raises:
            RecordError: a record no column can hold (nothing of its table is committed).
            SinkFatal: a schema change Iceberg cannot make, or a catalog that refuses.
            SinkUnavailable: the catalog is away, or another writer committed first.
        """
        try:
            if self._due():
                self.commit()
            else:
                self._store_position()
        except Exception:
            self._held = None  # a failed flush forgets it: the runner hands it again
            raise
        self._flushed = True

    def probe(self) -> None:
        """Called while idle: commit changes whose interval has passed."""
        if self._pending and self._flushed and self._due():
            self.commit()

    def commit(self) -> None:
        """Commit every table's buffered changes now, one Iceberg commit a table, then store
        the held position: only once every commit succeeded does it hold for the tables."""
        for table in list(self._pending):
            try:
                self._commit(table, self._pending[table])
            except RecordError as exc:
                self._drop(table, exc.record)
                raise
            del self._pending[table]
        self._since, self._fresh = None, False
        self._store_position()

    def close(self) -> None:
        """Commit what the runner handed over and saw flushed (a clean stop leaves nothing
        waiting for the next start), then forget the buffer. Records written since the last
        flush are not committed: that flush failed, or never came."""
        if self._pending and self._flushed and self._catalog is not None:
            try:
                self.commit()
            except Exception as exc:  # the next start replays them from the stored offsets
                self._log.warning("iceberg.close_commit_failed", error=str(exc))
        self._pending, self._since, self._seen = {}, None, dict(self._offsets)
        self._dropped, self._held = {}, None
        self._catalog = None

    def reset_table(self, table: Table, partitions: Sequence[TopicPartition]) -> None:
        """Drop the Iceberg table and create it again, empty, with offset 0 for ``partitions``
        in its properties (the table's offsets when it has no snapshot). The stored position
        is removed first (the table is read again from its start, so the sink's tables no
        longer hold it), and the held one forgotten with the table's buffered changes."""
        catalog = self._open_catalog()
        name = tables.identifier(self._namespace, table)
        self._held = None
        with self._translated(f"resetting {name[0]}.{name[1]}"):
            self._forget_position(catalog)
            if tables.load(catalog, name) is not None:
                catalog.drop_table(name)
            self._forget(table)
            offsets = {tp: 0 for tp in partitions}
            published = self._context.schemas.get(*table)
            if published is not None:
                self._tables[table] = tables.create(
                    catalog, name, published, self._config.mode, offsets
                )
                self._shapes[table] = published
            self._offsets.update(offsets)
            self._seen.update(offsets)
        self._log.info("iceberg.table_reset", table=f"{name[0]}.{name[1]}")

    # -- internals ---------------------------------------------------------------------------

    def _due(self) -> bool:
        if not self._pending:
            return False
        if self._fresh:
            return True
        if sum(map(len, self._pending.values())) >= self._config.max_rows:
            return True
        waited = time.monotonic() - (self._since or time.monotonic())
        return waited >= self._config.commit_interval_s

    def _forget_position(self, catalog: Catalog) -> None:
        """Remove the stored position before a reset. A catalog that refuses property writes
        (no namespace-update permission: the sink then stores no position, a doctor warning)
        holds none to remove, and the reset goes on; one that holds a position it cannot remove
        stops the reset, which would leave the position claiming more than the tables hold."""
        try:
            position.forget(catalog, self._namespace, self._position_key)
        except Exception as exc:  # pyiceberg, SQLAlchemy, HTTP: no common root
            if position.read(catalog, self._namespace, self._position_key) is not None:
                raise
            self._log.info("iceberg.position_not_forgotten", error=str(exc), stored=None)

    def _store_position(self) -> None:
        """Store the held position when the tables hold every record written before it:
        nothing buffered, and offsets stored for it to stand beside. A failed write is logged
        and the position kept for the next flush (the tables hold it already): the data is
        committed, so the flush does not fail for it."""
        held = self._held
        if held is None or self._pending or not self._offsets or self._catalog is None:
            return
        try:
            position.store(self._catalog, self._namespace, self._position_key, held)
        except Exception as exc:  # pyiceberg, SQLAlchemy, HTTP: no common root
            if not self._position_failing:  # once a streak: a flush a batch would flood
                error = self._message("storing the consistent position", exc)
                self._log.warning("iceberg.position_not_stored", error=error)
            self._position_failing = True
            return
        self._position_failing, self._held = False, None

    def _drop(self, table: Table, record: object) -> None:
        """Take a record the table cannot hold out of its buffer. The runner dead-letters it
        and hands the batch back without it, and ``write`` skips what it buffered already, so
        a record left here would fail every later commit. The table's next commit stores
        offsets past it (even when it was the partition's last record and the buffer is left
        empty), so a restart does not read it again."""
        pending = self._pending.get(table, [])
        kept = [r for r in pending if r is not record]
        if len(kept) == len(pending) or not isinstance(record, SinkRecord):
            return  # not buffered here: nothing to take out
        self._pending[table] = kept
        dropped = self._dropped.setdefault(table, {})
        dropped[record.tp] = max(dropped.get(record.tp, 0), record.offset + 1)

    def _commit(self, table: Table, records: list[SinkRecord]) -> None:
        where = f"{table[0]}.{table[1]}"
        with self._translated(f"committing {where}"):
            published = self._context.schemas.get(*table)
            if published is None:
                raise SinkFatal(f"no published schema for {where}: the sink cannot type it")
            found = self._table(table, published)
            offsets, truncated = self._committed(table, found)
            # What the table's last commit stored (this sink's, after a commit that failed
            # but landed; another worker's, for its partitions) is not applied twice.
            records = [r for r in records if r.offset >= offsets.get(r.tp, 0)]
            offsets.update(sink_offsets(records))
            for tp, offset in self._dropped.get(table, {}).items():
                offsets[tp] = max(offset, offsets.get(tp, 0))
            commit = apply.Commit(found, published, offsets, truncated, self._context, self._topics)
            started = time.monotonic()
            if self._config.mode == "current":
                self._truncated[table] = apply.apply_current(commit, records)
            else:
                apply.apply_append(commit, records)
        self._offsets.update(offsets)
        self._dropped.pop(table, None)
        self._tables.pop(table, None)  # the transaction committed a new metadata version
        self._log.debug(
            "iceberg.committed",
            table=where,
            records=len(records),
            seconds=round(time.monotonic() - started, 4),
        )

    def _committed(
        self, table: Table, found: IcebergTable
    ) -> tuple[dict[TopicPartition, int], Pos | None]:
        """The offsets of ``table``'s partitions and its truncate position: this sink's, or
        the table's last commit's where further. Offsets only move on (a reset makes a new
        table), and a commit carries every partition of the topic, so a commit never takes
        back another worker's progress on a partition it does not read."""
        mine = self._topics.table
        offsets = {tp: o for tp, o in self._offsets.items() if mine(tp.topic) == table}
        stored, truncated = tables.state(found)
        for tp, offset in stored.items():
            offsets[tp] = max(offset, offsets.get(tp, 0))
        held = self._truncated.get(table)
        if held is not None and (truncated is None or held > truncated):
            truncated = held
        return offsets, truncated

    def _table(self, table: Table, published: Any) -> IcebergTable:
        """The table, created or evolved from ``published`` when it is new to the sink."""
        catalog = self._open_catalog()
        name = tables.identifier(self._namespace, table)
        found = self._tables.get(table) or tables.load(catalog, name)
        if found is None:
            found = tables.create(catalog, name, published, self._config.mode)
        elif self._shapes.get(table) != published:
            tables.evolve(found, published, f"{name[0]}.{name[1]}")
            found = catalog.load_table(name)
        self._tables[table], self._shapes[table] = found, published
        return found

    def _load(self) -> None:
        """Each table's stored offsets and truncate position, read again."""
        catalog = self._open_catalog()
        self._tables, self._shapes, self._offsets = {}, {}, {}
        for table in self._context.tables:
            found = tables.load(catalog, tables.identifier(self._namespace, table))
            if found is None:
                continue
            offsets, self._truncated[table] = tables.state(found)
            self._offsets.update(offsets)
        for tp, offset in self._offsets.items():
            self._seen[tp] = max(offset, self._seen.get(tp, 0))

    def _forget(self, table: Table) -> None:
        self._tables.pop(table, None)
        self._shapes.pop(table, None)
        self._truncated.pop(table, None)
        self._pending.pop(table, None)
        self._dropped.pop(table, None)
        for tp in [tp for tp in self._offsets if self._topics.table(tp.topic) == table]:
            del self._offsets[tp]

    def _open_catalog(self) -> Catalog:
        if self._catalog is None:
            raise SinkFatal(f"Iceberg sink {self._context.sink_name}: used before open")
        return self._catalog

    @contextlib.contextmanager
    def _translated(self, doing: str) -> Iterator[None]:
        """pyiceberg's errors as the framework's, secrets taken out; a failed commit may
        have landed (an ambiguous answer), so the tables' state is read again after one."""
        try:
            yield
        except CdcError:
            raise
        except CommitFailedException as exc:
            self._reload()
            raise SinkUnavailable(self._message(doing, exc)) from None
        except (OSError, ConnectionError, TimeoutError) as exc:
            self._reload()
            raise SinkUnavailable(self._message(doing, exc)) from None
        except Exception as exc:  # pyiceberg, SQLAlchemy, pyarrow: no common root
            self._reload()
            if _unavailable(exc):
                raise SinkUnavailable(self._message(doing, exc)) from None
            raise SinkFatal(self._message(doing, exc)) from None

    def _reload(self) -> None:
        if self._catalog is not None:
            with contextlib.suppress(Exception):
                self._load()

    def _message(self, doing: str, exc: BaseException) -> str:
        if type(exc).__module__.startswith("pyarrow"):  # its messages quote the values
            text = f"{type(exc).__name__}: a value does not fit its column's type"
        else:
            text = self._config.scrub(f"{type(exc).__name__}: {exc}")
        return f"Iceberg sink {self._context.sink_name} ({self._config.where()}): {doing}: {text}"


def _unavailable(exc: Exception) -> bool:
    """A catalog that is away or busy now (SQLAlchemy's OperationalError: a locked SQLite
    file, a refused connection; a REST catalog's 503 or 504)."""
    name = type(exc).__name__
    return name in ("OperationalError", "ServiceUnavailableError", "ServerError")


def open_catalog(config: IcebergSinkConfig) -> Catalog:
    """pyiceberg's catalog for ``config`` (a SQLite file's directory is made first)."""
    properties = config.catalog_properties()
    uri = properties.get("uri", "")
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return load_catalog(config.name, **properties)
