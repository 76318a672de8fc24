"""The PostgreSQL sink: the source's tables, typed, kept current in a PostgreSQL database.

``write`` only buffers. ``flush`` applies the buffered records in one transaction: each table
created or evolved from its published schema, its changes staged and merged by source position
(:mod:`.apply`), and the next offset of every partition in ``_cdc_offsets``. The commit makes
all of it durable together, so after a crash the runner resumes from :meth:`stored_offsets` and
no effect is lost or doubled; a failed transaction leaves nothing behind.

The sink also reads the pipeline's schema topic (``reads_schemas``): a table the source
published but has no rows for yet is created from its schema.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import psycopg

from cdc.contracts.errors import CdcError, SinkFatal
from cdc.contracts.schema import TableSchema, schema_topic
from cdc.contracts.sink import SinkContext, SinkRecord, record_options
from cdc.envelope.options import EnvelopeOptions
from cdc.log.base import TopicPartition
from sinks.keyed import Table, TopicTables, split_schemas
from sinks.postgres import apply, catalog, history, offsets
from sinks.postgres.catalog import Ident, TableInfo
from sinks.postgres.config import PostgresSinkConfig
from sinks.postgres.connection import connect, translate, where
from sinks.postgres.evolve import prepare
from sinks.postgres.plan import TableChanges, plan
from sinks.postgres.types import Convert, converter

Converters = Mapping[str, Convert]


class PostgresSink:
    """Keeps ``<schema>.<table>`` of a PostgreSQL database in sync with the source's topics."""

    reads_schemas = True

    def __init__(self, config: PostgresSinkConfig, context: SinkContext) -> None:
        self._config = config
        self._context = context
        self._schema = config.schema_
        self._history = config.mode == "history"
        self._ident = Ident(context.pipeline, context.sink_name)
        self._schema_topic = schema_topic(context.pipeline)
        self._tables = set(context.tables)
        self._topic_tables = TopicTables(context.pipeline, context.tables)
        self._conn: psycopg.Connection[Any] | None = None
        self._infos: dict[Table, TableInfo] = {}
        self._shapes: dict[Table, TableSchema | None] = {}  # the schema each info follows
        self._offsets: dict[TopicPartition, int] = {}
        self._pending: list[SinkRecord] = []
        self._position: str | None = None  # stored with the next flush's offsets
        self._log = context.logger

    def open(self) -> None:
        """Connect, create the schema and the sink's tables, and read back the offsets.

        Raises:
            SinkUnavailable: the server cannot be reached now.
            SinkFatal: it refuses the credentials, or the user may not create the tables.
        """
        self._conn = connect(self._config)
        try:
            with self._translated("preparing the schema"):
                with self._conn.transaction():
                    catalog.lock_meta(self._conn, self._schema)
                    for ddl in (
                        *catalog.meta_ddl(self._schema),
                        offsets.positions_ddl(self._schema),
                    ):
                        self._conn.execute(ddl)
                self._load()
        except BaseException:
            self.close()
            raise
        self._log.info("postgres.opened", target=where(self._config), schema=self._schema)

    def stored_offsets(self) -> Mapping[TopicPartition, int]:
        """The offsets as stored now: read again, since another worker of this sink (on
        Kafka) may have moved a partition's on before it was assigned here."""
        if self._conn is not None and not self._conn.closed:
            with self._translated("reading the offsets"):
                self._load()
        return dict(self._offsets)

    def write(self, records: Sequence[SinkRecord]) -> None:
        self._pending.extend(records)

    def set_consistent_position(self, position: str) -> None:
        """Store ``position`` with the next flush's offsets, in its transaction
        (:class:`cdc.contracts.sink.PositionedSink`)."""
        self._position = position

    def flush(self) -> None:
        """Apply everything written since the last flush, in one transaction.

        Raises:
            RecordError: a record that cannot be applied (nothing of the batch is applied).
            SinkFatal: an incompatible schema change, or a target that refuses the changes.
            SinkUnavailable: the server went away (nothing of the batch is applied).
        """
        records, self._pending = self._pending, []
        held, self._position = self._position, None
        if not records and (held is None or not self._offsets):
            return
        conn = self._connection()
        data, announced, schema_offsets = split_schemas(records, self._schema_topic, self._tables)
        batches, next_offsets = plan(data, self._offsets, self._topic_tables, self._history)
        next_offsets.update(schema_offsets)
        with self._translated("applying a batch"), conn.transaction():
            for table in announced:
                self._prepare(table, only_published=True)
            for table, changes in batches.items():
                self._apply(table, changes)
            offsets.store(conn, self._schema, self._ident, next_offsets)
            if held is not None:
                offsets.store_position(conn, self._schema, self._ident, held)
        self._offsets.update(next_offsets)

    def close(self) -> None:
        self._pending = []
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None

    def reset_table(self, table: Table, partitions: Sequence[TopicPartition]) -> None:
        """Drop the target table, its deleted keys and its watermark, store offset 0 for each of
        ``partitions``, and create the table again, empty, from its published schema: all in
        one transaction.

        Raises:
            SinkFatal: the sink is not open, or PostgreSQL refused the change.
        """
        conn = self._connection()
        with self._translated(f"resetting {table[0]}.{table[1]}"), conn.transaction():
            name = self._config.target_table(table)
            found = catalog.load(conn, self._schema, name, self._ident)
            if found is not None:
                history.keep_before_reset(conn, found)
            catalog.drop(conn, TableInfo(self._schema, name), self._ident)
            self._infos.pop(table, None)
            self._shapes.pop(table, None)
            offsets.forget_topics(conn, self._schema, self._ident, {tp.topic for tp in partitions})
            offsets.store(conn, self._schema, self._ident, {tp: 0 for tp in partitions})
            offsets.forget_position(conn, self._schema, self._ident)
            self._prepare(table, only_published=True)
        self._load()
        self._log.info("postgres.table_reset", table=f"{table[0]}.{table[1]}")

    # -- internals ---------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        """The open connection; a lost one is opened again (the runner retries a batch on the
        same sink), with the offsets read back: the lost commit may have happened."""
        if self._conn is None:
            raise SinkFatal(f"PostgreSQL sink {self._context.sink_name}: used before open")
        if self._conn.closed:
            self._conn = connect(self._config)
            self._log.info("postgres.reconnected", target=where(self._config))
            with self._translated("reading the offsets"):
                self._load()
        return self._conn

    def _load(self) -> None:
        conn = self._conn
        assert conn is not None
        with conn.transaction():
            self._offsets = offsets.load(conn, self._schema, self._ident)
        self._infos, self._shapes = {}, {}

    def _info(self, table: Table) -> TableInfo | None:
        info = self._infos.get(table)
        if info is None:
            name = self._config.target_table(table)
            info = catalog.load(self._connection(), self._schema, name, self._ident)
        return info

    def _prepare(self, table: Table, only_published: bool = False) -> TableInfo | None:
        """The table as ``table``'s published schema wants it: created or evolved when that
        schema is new to this sink, under the table's DDL lock and from the catalog as it is
        then (another worker may have done it)."""
        published = self._context.schemas.get(*table)
        if only_published and (published is None or not published.key_columns):
            return None
        known = self._infos.get(table)
        if known is not None and self._shapes.get(table) == published:
            return known
        create_as = TableInfo(self._schema, self._config.target_table(table))
        conn = self._connection()
        catalog.lock_shape(conn, create_as)
        self._infos.pop(table, None)
        source = f"{table[0]}.{table[1]}"
        info = prepare(
            conn, self._info(table), create_as, published, source, self._ident, self._log
        )
        if self._history and not info.history:
            history.ensure(conn, info, source)
            self._log.info("postgres.history_created", table=source)
        self._infos[table], self._shapes[table] = info, published
        return info

    def _apply(self, table: Table, changes: TableChanges) -> None:
        info = self._prepare(table)
        assert info is not None  # prepare raises where there is no table to write
        convert = self._converters(table, info)
        conn = self._connection()
        if apply.apply(conn, info, changes, convert, self._ident, self._history):
            self._log.info("postgres.truncated", table=info.name, pos=list(info.watermark))

    def _converters(self, table: Table, info: TableInfo) -> Callable[[SinkRecord], Converters]:
        """Each record's column converters, by the encoding it was written under (a batch can
        span an envelope change)."""
        published = self._context.schemas.get(*table)
        types = {c.name: c.type for c in published.columns} if published is not None else {}
        by_options: dict[EnvelopeOptions | None, Converters] = {}

        def of(record: SinkRecord) -> Converters:
            options = record_options(record, self._context)
            found = by_options.get(options)
            if found is None:
                # A column the source dropped keeps its target type: read its values as that.
                found = by_options[options] = {
                    n: converter(types.get(n, t), options) for n, t in info.columns.items()
                }
            return found

        return of

    def _named(self, exc: SinkFatal) -> SinkFatal:
        """``exc`` naming this sink, and this sink in the ``cdc sink`` command of its fix."""
        name = self._context.sink_name
        text = str(exc).replace("cdc sink FILE SINK ", f"cdc sink FILE {name} ")
        return SinkFatal(f"PostgreSQL sink {name}: {text}")

    @contextlib.contextmanager
    def _translated(self, doing: str) -> Iterator[None]:
        """A psycopg error as the framework's; the in-memory table state is read again after a
        failure (the rolled-back transaction may have changed it)."""
        try:
            yield
        except SinkFatal as exc:
            self._infos, self._shapes = {}, {}
            if type(exc) is not SinkFatal or str(exc).startswith("PostgreSQL sink "):
                raise
            raise self._named(exc) from exc
        except CdcError:
            self._infos, self._shapes = {}, {}
            raise
        except psycopg.Error as exc:
            self._infos, self._shapes = {}, {}
            raise translate(exc, self._config, doing) from exc
