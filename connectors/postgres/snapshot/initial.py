"""Start a consistent initial snapshot: publication, slot with an exported snapshot, plan.

Order, and why:

1. the publication exists before the slot, because pgoutput looks it up as of each change's
   position and a publication created after the consistent point would be missing there;
2. the slot is created on a replication connection with ``SNAPSHOT 'export'``; that connection
   then stays open and idle, since the exported snapshot lives only until its next command;
3. chunks are planned inside the snapshot (exact boundaries), and the workers read them inside
   it too, so every row is read as of the slot's consistent point, where streaming starts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from cdc.config.pipeline import redact_url
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.support.clock import now_ms
from cdc.support.logging import Logger
from connectors.postgres.catalog import Catalog, TableInfo
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lifecycle import check_slot, create_slot
from connectors.postgres.lsn import Lsn
from connectors.postgres.publication.filters import PLAIN, TableFilter, table_filters
from connectors.postgres.publication.row_filters import prepare_publication
from connectors.postgres.replication.connection import ReplicationConnection, session_conninfo
from connectors.postgres.snapshot.reader import SnapshotTable, describe, plan
from connectors.postgres.types import TypeRegistry
from snapshots.chunks import Chunk
from snapshots.state import SnapshotState


@dataclass
class ExportedSnapshot:
    """A created slot whose exported snapshot is still alive (``repl`` stays idle)."""

    repl: ReplicationConnection
    consistent_point: Lsn
    snapshot_name: str
    database: str
    tables: list[SnapshotTable]
    work: list[tuple[SnapshotTable, Chunk]]
    ts_ms: int
    #: The snapshot transaction's id (``source.txId`` of its rows), as Debezium takes it.
    tx_id: int | None = None

    def release(self) -> None:
        """End the exported snapshot (closing the connection also frees the slot)."""
        self.repl.close()


def describe_tables(
    catalog: Catalog,
    config: PostgresSourceConfig,
    pipeline: str,
    role: str,
    logger: Logger,
    options: EnvelopeOptions = READABLE,
) -> list[SnapshotTable]:
    """Every captured table as the snapshot reads it; warns for tables chunked by ``ctid``."""
    registry = TypeRegistry(options)
    filters = table_filters(config)
    tables = []
    for schema, name in config.table_pairs():
        info = catalog.table(schema, name, role)
        table_filter = filters[info.name]
        tables.append(
            describe_one(
                catalog, registry, config, pipeline, info, logger, table_filter=table_filter
            )
        )
    return tables


def describe_one(
    catalog: Catalog,
    registry: TypeRegistry,
    config: PostgresSourceConfig,
    pipeline: str,
    info: TableInfo,
    logger: Logger,
    quiet: bool = False,
    table_filter: TableFilter = PLAIN,
) -> SnapshotTable:
    """The table as the snapshot reads it, through ``table_filter``; warns (unless ``quiet``)
    for ``ctid`` chunks."""
    table = describe(
        catalog,
        registry,
        pipeline,
        info,
        config.key_columns.get(info.name),
        config.snapshot_key_columns.get(info.name),
        table_filter,
    )
    if not table.chunk_key and not quiet:
        logger.warning(
            "snapshot.ctid_chunks",
            table=info.name,
            reason=f"table {info.name} has no primary key and no snapshot_key_columns: it is "
            "read in ctid page ranges (set source.snapshot_key_columns to a unique NOT NULL "
            "column list for keyset chunks)",
        )
    return table


def start_exported(
    config: PostgresSourceConfig,
    pipeline: str,
    state: SnapshotState,
    logger: Logger,
    slot_exists: bool,
    signal_table: tuple[str, str] | None = None,
    options: EnvelopeOptions = READABLE,
) -> ExportedSnapshot:
    """Create the slot with an exported snapshot and plan every table inside it.

    Args:
        slot_exists: the slot exists but cannot serve (no position stored): it is dropped and
            created again, as only a new slot exports a snapshot.
        signal_table: a signal table to publish along with the captured tables.
        options: the pipeline's envelope options (how values are written).

    Raises:
        SourceFatal: a problem a human must fix (named in the message).
        SourceUnavailable: the server cannot be reached.
    """
    dsn = config.dsn.get_secret_value()
    where = redact_url(dsn)
    slot = config.slot_name(pipeline)
    tables, database = _prepare(config, pipeline, logger, slot_exists, signal_table, options)
    repl = ReplicationConnection(dsn, where, config.connect_timeout_s)
    try:
        created = create_slot(repl, slot, logger, "export", config.slot_failover)
        point = Lsn.parse(created.consistent_point)
        assert created.snapshot_name is not None
        work, tx_id = _plan_all(config, created.snapshot_name, tables, state, point)
    except BaseException:
        repl.close()
        raise
    return ExportedSnapshot(
        repl, point, created.snapshot_name, database, tables, work, ts_ms=now_ms(), tx_id=tx_id
    )


def _prepare(
    config: PostgresSourceConfig,
    pipeline: str,
    logger: Logger,
    slot_exists: bool,
    signal_table: tuple[str, str] | None,
    options: EnvelopeOptions = READABLE,
) -> tuple[list[SnapshotTable], str]:
    """Check the server, describe the tables, ensure the publication, drop a useless slot."""
    dsn = config.dsn.get_secret_value()
    catalog = Catalog(dsn, redact_url(dsn), config.connect_timeout_s)
    try:
        catalog.check_server()
        role = catalog.check_role()
        tables = describe_tables(catalog, config, pipeline, role, logger, options)
        infos = [t.info for t in tables]
        if signal_table is not None:
            infos.append(catalog.table(*signal_table, role))
        publication = config.publication_name(pipeline)
        prepare_publication(catalog, publication, infos, role, logger, table_filters(config))
        database = catalog.database()
        slot = config.slot_name(pipeline)
        if slot_exists and check_slot(catalog, slot, database) is not None:
            catalog.rows(sql.SQL("SELECT pg_drop_replication_slot(%s)::text"), (slot,))
            logger.warning("slot.dropped_for_snapshot", slot=slot)
    finally:
        catalog.close()
    return tables, database


def _plan_all(
    config: PostgresSourceConfig,
    snapshot_name: str,
    tables: list[SnapshotTable],
    state: SnapshotState,
    point: Lsn,
) -> tuple[list[tuple[SnapshotTable, Chunk]], int | None]:
    """Every table's chunks, and the snapshot transaction's id."""
    snapshot_id = uuid.uuid4().hex
    state.begin_initial(snapshot_id, point)
    work: list[tuple[SnapshotTable, Chunk]] = []
    with _snapshot_connection(config, snapshot_name) as conn:
        for table in tables:
            if not table.read:
                continue  # its ops leave out r: no snapshot row of it reaches the log
            chunks = plan(conn, table, config.snapshot_chunk_rows)
            method = "keyset" if table.chunk_key else "ctid"
            state.plan_table(table.name, "initial", method, chunks, request=snapshot_id)
            work.extend((table, c) for c in chunks)
        tx_id = _snapshot_xid(conn)
    return work, tx_id


def _snapshot_xid(conn: psycopg.Connection[Any]) -> int | None:
    """The id Debezium's snapshot transaction has: ``txid_current()`` (0 on a standby, which
    assigns none). The transaction is rolled back: it wrote nothing, and an aborted one leaves
    nothing for the stream to decode."""
    row = conn.execute(
        sql.SQL("SELECT CASE pg_is_in_recovery() WHEN true THEN 0 ELSE txid_current() END")
    ).fetchone()
    conn.rollback()
    return None if row is None else int(row[0])


def _snapshot_connection(config: PostgresSourceConfig, name: str) -> psycopg.Connection[Any]:
    conninfo = session_conninfo(config.dsn.get_secret_value(), config.connect_timeout_s)
    conn = psycopg.connect(conninfo)
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(name)))
    return conn
