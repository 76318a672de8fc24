"""PostgreSQL's positions for read-your-writes fences (``cdc wait``, :mod:`cdc.fence`).

A fence waits until a sink holds every change committed up to a WAL position: the one a user
gives (``--position 0/16B3748``, as ``cdc status`` prints it) or the server's current one.
"""

from __future__ import annotations

from typing import Any

import psycopg

from cdc.config.pipeline import redact_url
from cdc.contracts.errors import SourceUnavailable
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lsn import Lsn
from connectors.postgres.replication.connection import session_conninfo

# The WAL written so far (every transaction that committed before the call ends at or before
# it); a standby has no WAL of its own to write: what it replayed is what its slot can decode.
_CURRENT = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
    "ELSE pg_current_wal_lsn() END"
)


def parse_position(text: str) -> Lsn:
    """``'0/16B3748'`` as an :class:`Lsn`.

    Raises:
        ValueError: not an LSN.
    """
    return Lsn.parse(text)


class CurrentPosition:
    """Reads ``pg_current_wal_lsn()``: at or after the end of every transaction committed
    before the call (with ``synchronous_commit`` on, as by default: an asynchronous commit may
    not be written yet, so its own fence should take the LSN its session reads after it).

    Keeps its connection for the next call (a fence per write would otherwise pay a connection
    each: about 12 ms of a 17 ms fence, bench/fence.py) and opens a new one after an error.
    """

    def __init__(self, config: PostgresSourceConfig) -> None:
        self._config = config
        self._conn: psycopg.Connection[Any] | None = None

    def __call__(self) -> Lsn:
        """The current WAL position.

        Raises:
            SourceUnavailable: the server cannot be reached (the message holds no secret).
        """
        dsn = self._config.dsn.get_secret_value()
        try:
            if self._conn is None or self._conn.closed:
                conninfo = session_conninfo(dsn, self._config.connect_timeout_s)
                self._conn = psycopg.connect(conninfo, autocommit=True)
            row: Any = self._conn.execute(_CURRENT).fetchone()
        except psycopg.Error as exc:
            self.close()
            where, why = redact_url(dsn), redact_url(str(exc))
            raise SourceUnavailable(f"cannot read the WAL position of {where}: {why}") from None
        return Lsn.parse(str(row[0]))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
