"""The replication connection: libpq in ``replication=database`` mode.

Commands (``CREATE_REPLICATION_SLOT``, ``START_REPLICATION``...) run blocking; once streaming,
the socket is non-blocking and driven by a selector, so a read waits at most its timeout and the
caller can answer the server's keepalives on time even when no change arrives.
"""

from __future__ import annotations

import selectors
import time
from dataclasses import dataclass
from typing import Literal

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from cdc.contracts.errors import SourceFatal
from connectors.postgres.config import parse_dsn
from connectors.postgres.errors import connect_error, lost
from connectors.postgres.lsn import Lsn
from connectors.postgres.types import TEXT_FORMAT_SETTINGS

#: Settings that make the server's text output of values match what the converters parse, on
#: the walsender and on the catalog connection alike (fallback reads must format values the same
#: way). libpq's ``options`` splits on spaces, so spaces inside values are escaped.
SESSION_OPTIONS = " ".join(
    f"-c {name}={value.replace(' ', chr(92) + ' ')}"
    for name, value in {**TEXT_FORMAT_SETTINGS, "TimeZone": "UTC"}.items()
)

SnapshotAction = Literal["nothing", "export", "use"]


@dataclass(frozen=True, slots=True)
class CreatedSlot:
    """What ``CREATE_REPLICATION_SLOT`` returned."""

    name: str
    consistent_point: str
    snapshot_name: str | None


def session_conninfo(dsn: str, connect_timeout_s: float, **extra: str) -> str:
    """``dsn`` with the session options this source relies on appended to the user's own.

    Raises:
        SourceFatal: libpq cannot parse ``dsn`` (the message holds none of its secrets).
    """
    try:
        params = parse_dsn(dsn)
    except ValueError as exc:
        raise SourceFatal(f"source.dsn is {exc}") from None
    own = str(params.get("options") or "")
    params["options"] = f"{own} {SESSION_OPTIONS}".strip()
    params.setdefault("connect_timeout", str(max(1, round(connect_timeout_s))))
    params.setdefault("application_name", "cdc")
    params.update(extra)
    return make_conninfo("", **params)


class ReplicationConnection:
    """One walsender connection.

    Args:
        dsn: the user's DSN (secret).
        where: the redacted DSN, for messages.
        connect_timeout_s: connection timeout.

    Raises:
        SourceFatal: bad credentials, unknown database, no replication privilege.
        SourceUnavailable: the server cannot be reached (retried).
    """

    def __init__(self, dsn: str, where: str, connect_timeout_s: float) -> None:
        self._where = where
        conninfo = session_conninfo(dsn, connect_timeout_s, replication="database")
        self._pg = pq.PGconn.connect(conninfo.encode())
        if self._pg.status != pq.ConnStatus.OK:
            message = self._pg.get_error_message()
            self._pg.finish()
            raise connect_error(where, message)
        self._selector: selectors.DefaultSelector | None = None
        self.streaming = False

    @property
    def server_version(self) -> int:
        """``server_version_num`` of the server, e.g. 150004."""
        return self._pg.server_version

    @property
    def backend_pid(self) -> int:
        """The walsender's process id."""
        return self._pg.backend_pid

    def command(self, command: bytes) -> list[tuple[str | None, ...]]:
        """Run a replication command and return its rows as text.

        Raises:
            SourceFatal: the server rejected the command.
            SourceUnavailable: the connection broke.
        """
        result = self._pg.exec_(command)
        if result.status in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
            return [
                tuple(
                    None if (v := result.get_value(row, col)) is None else bytes(v).decode()
                    for col in range(result.nfields)
                )
                for row in range(result.ntuples)
            ]
        if result.status == pq.ExecStatus.COPY_BOTH:
            return []
        message = result.get_error_message() or self._pg.get_error_message()
        if self._pg.status != pq.ConnStatus.OK:
            raise lost(self._where, message)
        state = result.error_field(pq.DiagnosticField.SQLSTATE)
        raise ReplicationCommandError(" ".join(message.split()), (state or b"").decode())

    def create_slot(
        self, slot: str, snapshot: SnapshotAction = "nothing", failover: bool = False
    ) -> CreatedSlot:
        """``CREATE_REPLICATION_SLOT slot LOGICAL pgoutput`` with the snapshot action (and
        ``FAILOVER``), in the syntax of this server's version (see :func:`create_slot_command`).

        With ``export``, the snapshot stays valid only while this connection runs no other
        command, so the caller keeps it idle until its snapshot reads are done.
        """
        command = create_slot_command(slot, snapshot, self.server_version, failover)
        name, point, snapshot_name, _plugin = self.command(command)[0]
        return CreatedSlot(name or slot, point or "0/0", snapshot_name)

    def enable_failover(self, slot: str) -> None:
        """``ALTER_REPLICATION_SLOT slot (FAILOVER true)`` (PostgreSQL 17+)."""
        require_failover_version(self.server_version)
        self.command(f"ALTER_REPLICATION_SLOT {quote_ident(slot)} (FAILOVER true)".encode())

    def start(self, slot: str, lsn: Lsn, options: dict[str, str]) -> None:
        """``START_REPLICATION SLOT slot LOGICAL lsn (options)``; switches to non-blocking.

        ``lsn`` is made an ``Lsn`` again for its text: a plain ``int`` would print in decimal,
        which the server rejects."""
        rendered = ", ".join(f"{quote_ident(k)} {quote_literal(v)}" for k, v in options.items())
        command = f"START_REPLICATION SLOT {quote_ident(slot)} LOGICAL {Lsn(lsn)} "
        self.command(f"{command}({rendered})".encode())
        self._pg.nonblocking = 1
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._pg.socket, selectors.EVENT_READ)
        self.streaming = True

    def read(self, timeout_s: float) -> memoryview | None:
        """The next CopyData message, or ``None`` when none arrived within ``timeout_s``.

        Raises:
            SourceUnavailable: the server closed the stream or the connection broke.
        """
        size, data = self._pg.get_copy_data(1)
        if size > 0:  # the hot path, one call a change: no clock read
            return data
        deadline = time.monotonic() + timeout_s
        while size == 0:
            # A zero wait still polls the socket: whatever arrived meanwhile is read.
            if not self._wait(max(0.0, deadline - time.monotonic())):
                return None
            self._consume()
            size, data = self._pg.get_copy_data(1)
        if size > 0:
            return data
        raise lost(self._where, self._stream_end_message())

    def send(self, data: bytes) -> None:
        """Queue one CopyData message and flush it, waiting for the socket if needed."""
        try:
            if self._pg.put_copy_data(data) != 1:
                raise lost(self._where, self._pg.get_error_message())
            while self._pg.flush() == 1:
                # libpq asks to read while waiting to write, or the server may block on us.
                self._wait(1.0, selectors.EVENT_READ | selectors.EVENT_WRITE)
                self._consume()
        except psycopg.OperationalError as exc:
            raise lost(self._where, str(exc)) from exc

    def close(self) -> None:
        """Close the connection; the server releases the slot."""
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        self.streaming = False
        self._pg.finish()

    def _wait(self, timeout_s: float, events: int = selectors.EVENT_READ) -> bool:
        assert self._selector is not None
        if events != selectors.EVENT_READ:
            self._selector.modify(self._pg.socket, events)
            try:
                return bool(self._selector.select(timeout_s))
            finally:
                self._selector.modify(self._pg.socket, selectors.EVENT_READ)
        return bool(self._selector.select(timeout_s))

    def _consume(self) -> None:
        try:
            self._pg.consume_input()
        except psycopg.OperationalError as exc:
            raise lost(self._where, str(exc)) from exc

    def _stream_end_message(self) -> str:
        message = self._pg.get_error_message()
        result = self._pg.get_result()
        if result is not None and result.error_message:
            message = result.get_error_message()
        return message or "the server ended the replication stream"


class ReplicationCommandError(SourceFatal):
    """The server rejected a replication command; ``sqlstate`` tells why."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


#: The first version that takes ``CREATE_REPLICATION_SLOT``'s options in parentheses.
PARENTHESISED_OPTIONS_VERSION = 150000

#: PostgreSQL 14's keywords for each snapshot action (its only syntax; 15 still accepts them
#: but documents them as deprecated, so newer servers get the parenthesised form).
_LEGACY_SNAPSHOT_KEYWORDS: dict[SnapshotAction, str] = {
    "nothing": "NOEXPORT_SNAPSHOT",
    "export": "EXPORT_SNAPSHOT",
    "use": "USE_SNAPSHOT",
}


#: The first version with failover slots (``FAILOVER``, ``ALTER_REPLICATION_SLOT``).
FAILOVER_VERSION = 170000


def require_failover_version(server_version: int) -> None:
    """Raise the start error for ``source.slot_failover`` on a server before PostgreSQL 17.

    Raises:
        SourceFatal: the server has no failover slots.
    """
    if server_version < FAILOVER_VERSION:
        raise SourceFatal(
            "source.slot_failover needs PostgreSQL 17 or later (failover slots); the server is "
            f"PostgreSQL {server_version // 10000}: set slot_failover: false, or upgrade"
        )


def create_slot_command(
    slot: str, snapshot: SnapshotAction, server_version: int, failover: bool = False
) -> bytes:
    """The ``CREATE_REPLICATION_SLOT`` command for a pgoutput slot on ``server_version``.

    Args:
        slot: The slot name (quoted here).
        snapshot: What to do with the slot's snapshot: export it, use it in this transaction,
            or nothing.
        server_version: ``server_version_num``, e.g. 140019 or 170006.
        failover: create a failover slot, which the standbys' slot sync worker copies
            (PostgreSQL 17+).

    Returns:
        The command: ``(SNAPSHOT 'export')`` from PostgreSQL 15 on, ``EXPORT_SNAPSHOT`` before;
        ``(SNAPSHOT 'export', FAILOVER true)`` with failover.

    Raises:
        SourceFatal: failover on a server before PostgreSQL 17.
    """
    if failover:
        require_failover_version(server_version)
    command = f"CREATE_REPLICATION_SLOT {quote_ident(slot)} LOGICAL pgoutput "
    if server_version >= PARENTHESISED_OPTIONS_VERSION:
        options = f"SNAPSHOT {quote_literal(snapshot)}" + (", FAILOVER true" if failover else "")
        command += f"({options})"
    else:
        command += _LEGACY_SNAPSHOT_KEYWORDS[snapshot]
    return command.encode()


def quote_ident(name: str) -> str:
    """A double-quoted identifier for a replication command."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """A single-quoted literal for a replication command."""
    return "'" + value.replace("'", "''") + "'"
