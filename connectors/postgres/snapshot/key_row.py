"""Read one row by its key in the stream's value form, for ``cdc trace``: the row as the sinks
got it (the table's columns, masks and row filter applied, as :mod:`.table_rows` reads a whole
table for ``cdc verify``), and whether the row filter is what leaves it out."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from cdc.config.pipeline import redact_url
from cdc.envelope.options import READABLE, EnvelopeOptions
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.errors import QueryRefused, connect_error
from connectors.postgres.replication.connection import session_conninfo
from connectors.postgres.snapshot.reader import read_rows
from connectors.postgres.snapshot.table_rows import describe_table


def read_key(
    config: PostgresSourceConfig,
    schema: str,
    table: str,
    key: dict[str, Any],
    *,
    envelope: EnvelopeOptions = READABLE,
) -> tuple[dict[str, Any] | None, bool]:
    """``(row, exists)``: the key's row as the sinks got it (``None``: none, or the row filter
    leaves it out), and whether the table has the key at all, its row filter aside.

    ``key`` holds the record key's values: the key columns' values as the stream writes them,
    compared by their text with the columns (a key column the configuration masks holds the
    masked value in the record key: the caller reads such a table whole instead).

    Raises:
        LookupError: a key value the key column's type cannot read (the caller reads the table
            whole and compares record keys instead).
        SourceError: the server cannot be reached.
    """
    dsn = config.dsn.get_secret_value()
    name = f"{schema}.{table}"
    described = describe_table(config, schema, table, envelope, "trace")
    conninfo = session_conninfo(dsn, config.connect_timeout_s, application_name="cdc-trace")
    by_key = sql.SQL(" AND ").join(_equal(column, value) for column, value in key.items())
    try:
        with psycopg.connect(conninfo) as conn:
            row = _row(conn, described, schema, table, by_key, filtered=True)
            if row is not None or not described.where:
                return row, row is not None
            return None, _row(conn, described, schema, table, by_key, filtered=False) is not None
    except (psycopg.DataError, QueryRefused) as exc:  # a key value its column does not read
        # (QueryRefused: the same, from a table whose masks keep the server's message out)
        raise LookupError(f"{name}: the key is not of the table's key types") from exc
    except psycopg.OperationalError as exc:
        raise connect_error(redact_url(dsn), str(exc)) from exc


def _row(
    conn: psycopg.Connection[Any],
    described: Any,
    schema: str,
    table: str,
    by_key: sql.Composable,
    filtered: bool,
) -> dict[str, Any] | None:
    where = by_key
    if filtered and described.where:
        # The row filter is the operator's SQL, accepted by the server as the publication's.
        where = sql.SQL("({}) AND ({})").format(sql.SQL(described.where), by_key)
    query = sql.SQL("COPY (SELECT {} FROM {} WHERE {}) TO STDOUT").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in described.columns),
        sql.Identifier(schema, table),
        where,
    )
    for piece in read_rows(conn, query, 2, described.hides_values):
        for values in piece:
            return dict(described.state.convert(values))
    return None


def _equal(column: str, value: Any) -> sql.Composable:
    if value is None:  # a keyless table's record key holds every column, NULLs too
        return sql.SQL("{} IS NULL").format(sql.Identifier(column))
    # An untyped literal takes the column's type, so the primary key's index serves it.
    return sql.SQL("{} = {}").format(sql.Identifier(column), sql.Literal(_text(value)))


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
