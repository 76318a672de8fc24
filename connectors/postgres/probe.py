"""The slot's health, read on a side connection: what the metrics sampler and ``cdc status`` show.

One query of ``pg_replication_slots`` for the pipeline's slot: ``active``, ``wal_status``, the
WAL it holds (the server's WAL position minus ``restart_lsn``), its ``confirmed_flush_lsn``
and whether the server has WAL past it (work waiting for the source). On a standby the
server's position is the last replayed one (``pg_current_wal_lsn()`` fails in recovery).
The connection is opened on first use and again after it breaks; the sampler's interval bounds
how often it is used.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from cdc.config import redact_url
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.replication import session_conninfo

_SLOT = sql.SQL(
    "WITH here AS (SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
    " ELSE pg_current_wal_lsn() END AS lsn)"
    " SELECT s.active, s.wal_status, pg_wal_lsn_diff(here.lsn, s.restart_lsn)::int8,"
    " pg_wal_lsn_diff(s.confirmed_flush_lsn, '0/0')::int8, here.lsn > s.confirmed_flush_lsn"
    " FROM pg_replication_slots s, here WHERE s.slot_name = %s"
)


class SlotProbe:
    """Reads the slot's health; one connection, opened lazily, used by one thread at a time."""

    def __init__(self, config: PostgresSourceConfig, pipeline: str) -> None:
        self._config = config
        self._slot = config.slot_name(pipeline)
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> Mapping[str, Any]:
        """``retained_wal_bytes``, ``slot_active``, ``wal_status``, ``position`` (the
        confirmed LSN as a number) and ``behind``; ``{"slot_exists": False}`` when the slot is
        not there (yet).

        Raises:
            psycopg.Error: the server cannot be read (its message redacted by the caller).
        """
        with self._lock:
            try:
                row = self._connection().execute(_SLOT, (self._slot,)).fetchone()
            except psycopg.Error:
                self.close()  # reconnect next time
                raise
        if row is None:
            return {"slot_exists": False, "slot_active": False}
        active, wal_status, retained, confirmed, behind = row
        return {
            "slot_exists": True,
            "slot_active": bool(active),
            "wal_status": wal_status,
            "retained_wal_bytes": max(0, int(retained or 0)),
            "position": confirmed,
            "behind": bool(behind),
        }

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
        if self._conn is not None:
            self._conn.close()
            self._conn = None
