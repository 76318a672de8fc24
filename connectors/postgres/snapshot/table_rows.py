"""Read a whole table's current rows in the stream's value form, for ``cdc verify``.

Values go through the same text converters as the stream and the snapshot, so a row read here
equals the ``after`` image a sink received for it; the table's filters (``source.tables``:
columns, masks, row filter) apply as they do there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import psycopg
from psycopg import sql

from cdc.config.pipeline import redact_url
from cdc.envelope.options import READABLE, EnvelopeOptions
from connectors.postgres.catalog import Catalog
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.publication.filters import PLAIN, table_filters
from connectors.postgres.replication.connection import session_conninfo
from connectors.postgres.snapshot.reader import describe, read_rows
from connectors.postgres.types import TypeRegistry

PIECE_ROWS = 5000


def table_rows(
    config: PostgresSourceConfig,
    schema: str,
    table: str,
    envelope: EnvelopeOptions = READABLE,
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(key, row)`` for every row of ``schema.table``, as of one consistent read.

    ``envelope``: the pipeline's options, which the stream shapes values under; the type
    registry below gets them as the stream's does.
    """
    dsn = config.dsn.get_secret_value()
    described = describe_table(config, schema, table, envelope, "verify")
    # The row filter is the operator's SQL, accepted by the server as the publication's.
    where = sql.SQL(" WHERE ({})").format(sql.SQL(described.where)) if described.where else None
    query = sql.SQL("COPY (SELECT {} FROM {}{}) TO STDOUT").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in described.columns),
        sql.Identifier(schema, table),
        where or sql.SQL(""),
    )
    convert, key_names = described.state.convert, described.state.key
    conninfo = session_conninfo(dsn, config.connect_timeout_s, application_name="cdc-verify")
    # The COPY's generator is closed before its connection: left open (a reader that stops at
    # a row), it holds the connection's lock, and the connection's exit waits on it forever.
    # Closed, psycopg's COPY exit cancels the query on the server instead of reading the rest.
    with (
        psycopg.connect(conninfo) as conn,
        closing(
            read_rows(conn, query, PIECE_ROWS, described.hides_values, config.max_batch_bytes)
        ) as pieces,
    ):
        for piece in pieces:
            for values in piece:
                row = convert(values)
                yield {k: row[k] for k in key_names}, row


def describe_table(
    config: PostgresSourceConfig,
    schema: str,
    table: str,
    envelope: EnvelopeOptions,
    purpose: str,
) -> Any:
    """The table as the stream shapes it (its columns, masks and row filter, the converters of
    the pipeline's ``envelope``), for a read outside the stream: ``cdc verify`` and ``cdc trace``.
    """
    dsn = config.dsn.get_secret_value()
    catalog = Catalog(dsn, redact_url(dsn), config.connect_timeout_s)
    name = f"{schema}.{table}"
    try:
        info = catalog.table(schema, table, catalog.check_role())
        return describe(
            catalog,
            TypeRegistry(envelope),
            purpose,
            info,
            config.key_columns.get(name),
            None,
            table_filters(config).get(name, PLAIN),
        )
    finally:
        catalog.close()


def keyed_by_value(config: PostgresSourceConfig, schema: str, table: str) -> bool:
    """Whether the records of ``schema.table`` are keyed by every column for want of a key:
    no primary key, no ``key_columns``, ``REPLICA IDENTITY FULL``. Identical rows then share
    one key, so a sink holds them as one row (``cdc verify`` says so rather than report it as
    a difference)."""
    if config.key_columns.get(f"{schema}.{table}"):
        return False
    dsn = config.dsn.get_secret_value()
    catalog = Catalog(dsn, redact_url(dsn), config.connect_timeout_s)
    try:
        info = catalog.table(schema, table, catalog.check_role())
    finally:
        catalog.close()
    return not info.primary_key and info.replica_identity == "f"
