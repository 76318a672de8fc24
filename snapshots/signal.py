"""``cdc snapshot``: ask a running pipeline to re-snapshot a table, through the change stream.

The request is a transactional logical message (prefix ``<pipeline>.signal``), or a row in the
signal table for a role that may not emit messages (:mod:`snapshots.channel`), written on an
ordinary connection. The pipeline's source sees it in commit order, stores it with the batch that
carried it, and then reads the table in chunks between watermarks while it keeps streaming, as
Debezium's signalling does. A pipeline that is not running picks the request up when it starts.

``--where`` is SQL the operator writes, so it is trusted input: it is checked to be one boolean
expression that the server accepts against the table, then passed through as
:class:`psycopg.sql.SQL`.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
import psycopg
from psycopg import sql

from cdc.config import redact_url
from cdc.errors import ConfigError, SourceFatal
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.errors import connect_error
from connectors.postgres.replication import session_conninfo
from snapshots.channel import SIGNAL, choose
from snapshots.state import OFFSET_KEY

_FORBIDDEN = (";", "--", "/*")


def check_where_text(where: str) -> None:
    """Reject what cannot be a single expression (statement separators, comments, parentheses
    that close more than they open).

    Raises:
        ConfigError: with the reason.
    """
    problems = [f"--where may not contain {token!r}" for token in _FORBIDDEN if token in where]
    depth = 0
    quoted = False
    for char in where:
        if char == "'":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
            if depth < 0:
                break
    if depth != 0 or quoted:
        problems.append("--where has unbalanced parentheses or quotes")
    if not where.strip():
        problems.append("--where is empty")
    if problems:
        raise ConfigError([("--where", p) for p in problems])


def request_snapshot(
    config: PostgresSourceConfig, pipeline: str, table: str, where: str | None
) -> dict[str, Any]:
    """Write a snapshot request for ``table`` into the change stream.

    Returns:
        The request: ``{"id", "table", "where", "lsn"}``.

    Raises:
        ConfigError: the table is not captured, or ``where`` is not a valid expression.
        SourceFatal: the request could not be written.
    """
    if table not in config.tables:
        raise ConfigError([("--table", f"{table} is not one of source.tables {config.tables}")])
    if where is not None:
        check_where_text(where)
    dsn = config.dsn.get_secret_value()
    try:
        conn = psycopg.connect(session_conninfo(dsn, config.connect_timeout_s), autocommit=True)
    except psycopg.OperationalError as exc:
        raise connect_error(redact_url(dsn), str(exc)) from exc
    request = {"id": uuid.uuid4().hex, "type": "snapshot", "table": table, "where": where}
    with conn:
        if where is not None:
            _check_where_on_server(conn, table, where)
        channel = choose(conn, config, pipeline)
        try:
            lsn = channel.write(conn, SIGNAL, orjson.dumps(request).decode())
        except psycopg.errors.UndefinedTable as exc:
            raise SourceFatal(
                f"signal table {channel.table_id} does not exist yet: start `cdc run` once, "
                "it creates it"
            ) from exc
        except psycopg.Error as exc:
            raise SourceFatal(f"cannot write the snapshot request: {exc}") from exc
    return {**request, "lsn": lsn}


def _check_where_on_server(conn: psycopg.Connection[Any], table: str, where: str) -> None:
    schema, _, name = table.partition(".")
    probe = sql.SQL("SELECT 1 FROM {} WHERE ({}) LIMIT 0").format(
        sql.Identifier(schema, name),
        sql.SQL(where),  # the operator's own SQL, checked above
    )
    try:
        with conn.transaction():
            conn.execute("SET TRANSACTION READ ONLY")
            conn.execute(probe)
    except psycopg.Error as exc:
        raise ConfigError([("--where", f"the server rejects it: {exc}")]) from exc


def progress(offsets: dict[str, Any], request_id: str) -> dict[str, Any]:
    """What the stored offsets say about a request: ``{"done", "tables": {...}}``."""
    state = offsets.get(OFFSET_KEY) or {}
    tables = {
        name: {
            "chunks_done": sum(b - a + 1 for a, b in entry.get("done", [])),
            "chunks_total": entry.get("chunks_total", 0),
            "rows": entry.get("rows", 0),
        }
        for name, entry in (state.get("tables") or {}).items()
        if entry.get("request") == request_id
    }
    return {"done": request_id in (state.get("finished") or []), "tables": tables}
