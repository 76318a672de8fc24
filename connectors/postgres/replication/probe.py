"""The slot's health, read on a side connection: what the metrics sampler and ``cdc status`` show.

One query of ``pg_replication_slots`` for the pipeline's slot: ``active``, ``wal_status``, the
WAL it holds (the server's WAL position minus ``restart_lsn``), its ``confirmed_flush_lsn``
and whether the server has WAL past it (work waiting for the source). On a standby the
server's position is the last replayed one (``pg_current_wal_lsn()`` fails in recovery).
From PostgreSQL 17 the row also says since when the slot is inactive (``inactive_since``) and
why the server invalidated it (``invalidation_reason``); older servers lack the columns, so they
are neither queried nor shown there.
The connection is opened on first use and again after it breaks; the sampler's interval bounds
how often it is used.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from cdc.config.pipeline import redact_url
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.replication.connection import session_conninfo
from connectors.postgres.replication.versions import SLOT_INACTIVE_SINCE_VERSION

_HEALTH = (
    "WITH here AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
    " ELSE pg_current_wal_lsn() END AS lsn)"
    " SELECT s.active, s.wal_status, pg_wal_lsn_diff(here.lsn, s.restart_lsn)::int8,"
    " pg_wal_lsn_diff(s.confirmed_flush_lsn, '0/0')::int8, here.lsn > s.confirmed_flush_lsn"
)
_FROM = " FROM pg_replication_slots s, here WHERE s.slot_name = %s"
_SLOT = sql.SQL(_HEALTH + _FROM)
_SLOT_17 = sql.SQL(_HEALTH + ", s.inactive_since, s.invalidation_reason::text" + _FROM)


def slot_query(server_version: int) -> sql.SQL:
    """The slot's row on a server of ``server_version``: with PostgreSQL 17's
    ``inactive_since`` and ``invalidation_reason`` from 17 on."""
    return _SLOT_17 if server_version >= SLOT_INACTIVE_SINCE_VERSION else _SLOT


class SlotProbe:
    """Reads the slot's health; one connection, opened lazily, used by one thread at a time."""

    def __init__(self, config: PostgresSourceConfig, pipeline: str) -> None:
        self._config = config
        self._slot = config.slot_name(pipeline)
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> Mapping[str, Any]:
        """``retained_wal_bytes``, ``slot_active``, ``wal_status``, ``position`` (the
        confirmed LSN as a number) and ``behind``; from PostgreSQL 17 also ``inactive_since``
        (ISO 8601, ``None`` while a process streams) and ``invalidation_reason`` (``None``
        unless the server invalidated the slot); ``{"slot_exists": False}`` when the slot is
        not there (yet).

        Raises:
            psycopg.Error: the server cannot be read (its message redacted by the caller).
        """
        with self._lock:
            try:
                conn = self._connection()
                query = slot_query(conn.info.server_version)
                row = conn.execute(query, (self._slot,)).fetchone()
            except psycopg.Error:
                self.close()  # reconnect next time
                raise
        if row is None:
            return {"slot_exists": False, "slot_active": False}
        return _health(row)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            dsn = self._config.dsn.get_secret_value()
            conninfo = session_conninfo(dsn, self._config.connect_timeout_s)
            try:
                self._conn = psycopg.connect(conninfo, autocommit=True)
            except psycopg.OperationalError as exc:
                where = redact_url(dsn)
                # The driver's message may quote the DSN: only the redacted address goes on.
                message = f"cannot reach {where} for the slot's health: {redact_url(str(exc))}"
                raise psycopg.OperationalError(message) from None
        return self._conn

    def close(self) -> None:
        """Disconnect (the next call connects again)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _health(row: tuple[Any, ...]) -> dict[str, Any]:
    """The mapping of one row of :func:`slot_query` (5 columns, or 7 from PostgreSQL 17)."""
    active, wal_status, retained, confirmed, behind = row[:5]
    health: dict[str, Any] = {
        "slot_exists": True,
        "slot_active": bool(active),
        "wal_status": wal_status,
        "retained_wal_bytes": max(0, int(retained or 0)),
        "position": confirmed,
        "behind": bool(behind),
    }
    if len(row) > 5:
        since, reason = row[5:]
        # A string, so that ``cdc status --json`` shows it as the server's time.
        health["inactive_since"] = since.isoformat() if isinstance(since, datetime) else since
        health["invalidation_reason"] = reason
    return health
