"""``cdc snapshot``: ask a running pipeline to re-snapshot a table, or to cancel requests,
through the change stream.

A signal is a transactional logical message (prefix ``<pipeline>.signal``), or a row in the
signal table for a role that may not emit messages (:mod:`.channel`), written on an
ordinary connection. The pipeline's source sees it in commit order, stores its effect with the
batch that carried it, and then reads the table in chunks between watermarks while it keeps
streaming, as Debezium's signalling does. A pipeline that is not running acts on the signal when
it starts: the stored position is before it, so the stream delivers it then.

Two kinds: ``{"type": "snapshot", "id", "table", "where"}`` and ``{"type": "cancel", "id",
"request"}`` (``request`` null: every request). Cancelling the same way, rather than by editing
the stored offsets, keeps the source the only writer of its state and orders a cancel after the
requests written before it.

``--where`` is SQL the operator writes, so it is trusted input: it is checked to be one boolean
expression (:mod:`.where`) that the server accepts against the table, and evaluates on a
sample of its rows in a read-only transaction, then passed through as :class:`psycopg.sql.SQL`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import orjson
import psycopg

from cdc.config.pipeline import redact_url
from cdc.contracts import snapshot_offsets
from cdc.contracts.errors import ConfigError, SourceFatal
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.errors import connect_error
from connectors.postgres.replication.connection import session_conninfo
from connectors.postgres.snapshot.channel import SIGNAL, choose
from connectors.postgres.snapshot.repair import keys_where
from connectors.postgres.snapshot.where import check_where_on_server, check_where_text

__all__ = ["cancel_snapshot", "check_where_text", "progress", "request_repair", "request_snapshot"]


def request_snapshot(
    config: PostgresSourceConfig, pipeline: str, table: str, where: str | None
) -> dict[str, Any]:
    """Write a snapshot request for ``table`` into the change stream.

    Returns:
        The request: ``{"id", "type", "table", "where", "lsn"}``.

    Raises:
        ConfigError: the table is not captured, or ``where`` is not a valid expression.
        SourceFatal: the request could not be written.
    """
    if table not in config.table_names:
        raise ConfigError(
            [("--table", f"{table} is not one of source.tables {config.table_names}")]
        )
    if not config.table_entry(table).allows("r"):
        raise ConfigError([("--table", f"the ops of {table} leave out r: no snapshot reads it")])
    if where is not None:
        check_where_text(where)
    request = {"id": uuid.uuid4().hex, "type": "snapshot", "table": table, "where": where}

    entry = config.table_entry(table)
    row_filter = entry.where if isinstance(entry.where, str) else None
    hides_values = bool(entry.columns or entry.mask or entry.where is not None)

    def check(conn: psycopg.Connection[Any]) -> None:
        if where is not None:
            check_where_on_server(conn, table, where, row_filter, hides_values)

    return _write(config, pipeline, request, check)


def request_repair(
    config: PostgresSourceConfig, pipeline: str, table: str, keys: list[dict[str, Any]]
) -> dict[str, Any]:
    """Write a repair request (``cdc verify --repair``) for ``keys`` of ``table``: a snapshot
    request reading only those keys, and deleting, in the same window, each the table lacks
    (:mod:`.repair`). Each key is a JSON object of the key's columns.

    Returns:
        The request: ``{"id", "type", "table", "where", "keys", "lsn"}``.

    Raises:
        ConfigError: the table is not captured, or is not read by snapshots.
        SourceFatal: the request could not be written.
    """
    if table not in config.table_names:
        raise ConfigError([("--table", f"{table} is not one of source.tables")])
    if not config.table_entry(table).allows("r"):
        raise ConfigError([("--table", f"the ops of {table} leave out r: no snapshot reads it")])
    request: dict[str, Any] = {"id": uuid.uuid4().hex, "type": "snapshot", "table": table}
    schema, _, name = table.partition(".")

    def check(conn: psycopg.Connection[Any]) -> None:
        request["where"] = keys_where(conn, (schema, name), tuple(keys[0]), keys)
        request["keys"] = keys

    return _write(config, pipeline, request, check)


def cancel_snapshot(
    config: PostgresSourceConfig, pipeline: str, request_id: str | None
) -> dict[str, Any]:
    """Write a cancel signal for request ``request_id`` (``None``: every request).

    The pipeline drops the request wherever it is (queued, running, failed) when the signal
    reaches it; rows a running request already wrote stay, as upserts they are harmless.

    Returns:
        The signal: ``{"id", "type", "request", "lsn"}``.

    Raises:
        SourceFatal: the signal could not be written.
    """
    signal = {"id": uuid.uuid4().hex, "type": "cancel", "request": request_id}
    return _write(config, pipeline, signal, lambda conn: None)


def _write(
    config: PostgresSourceConfig,
    pipeline: str,
    signal: dict[str, Any],
    check: Callable[[psycopg.Connection[Any]], None],
) -> dict[str, Any]:
    dsn = config.dsn.get_secret_value()
    try:
        conn = psycopg.connect(session_conninfo(dsn, config.connect_timeout_s), autocommit=True)
    except psycopg.OperationalError as exc:
        raise connect_error(redact_url(dsn), str(exc)) from exc
    with conn:
        check(conn)
        channel = choose(conn, config, pipeline)
        try:
            lsn = channel.write(conn, SIGNAL, orjson.dumps(signal).decode())
        except psycopg.errors.UndefinedTable as exc:
            raise SourceFatal(
                f"signal table {channel.table_id} does not exist yet: start `cdc run` once, "
                "it creates it"
            ) from exc
        except psycopg.Error as exc:
            raise SourceFatal(f"cannot write the snapshot {signal['type']}: {exc}") from exc
    return {**signal, "lsn": lsn}


def progress(offsets: dict[str, Any], request_id: str) -> dict[str, Any]:
    """What the stored offsets say about a request: ``{"done", "tables": {...}}``."""
    state = snapshot_offsets.read(offsets)
    if state is None:
        return {"done": False, "tables": {}}
    tables = {
        t.table: {"chunks_done": t.chunks_done, "chunks_total": t.chunks_total, "rows": t.rows}
        for t in state.tables
        if t.request == request_id
    }
    return {"done": request_id in state.finished, "tables": tables}
