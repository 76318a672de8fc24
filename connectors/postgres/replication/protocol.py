"""The streaming replication protocol's CopyBoth framing, as pure functions over bytes.

Inside ``START_REPLICATION`` every CopyData message from the server is an XLogData (``'w'``)
carrying one pgoutput message, or a primary keepalive (``'k'``). The client answers with
standby status updates (``'r'``) that report how far it wrote, flushed and applied: the flush
LSN is what lets the server recycle WAL, so it must never run ahead of durable records.

Also the PostgreSQL-clock helpers the source needs to talk about times (LSNs are
:class:`connectors.postgres.lsn.Lsn`; the frames read in the per-message loop keep the socket's
plain ints, which cost no call to wrap).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Final

from connectors.postgres.lsn import Lsn
from connectors.postgres.pgoutput import ProtocolError

__all__ = [
    "PG_EPOCH_UNIX_US",
    "XLOG_HEADER_SIZE",
    "PrimaryKeepalive",
    "ReplicationMessage",
    "XLogData",
    "now_pg_us",
    "parse_copy_data",
    "parse_keepalive",
    "parse_xlog_data",
    "pg_time_to_unix_ms",
    "standby_status_update",
    "unix_ms_to_pg_time",
    "xlog_wal_start",
]

PG_EPOCH_UNIX_US: Final = 946_684_800_000_000
"""2000-01-01T00:00:00Z, PostgreSQL's epoch, in microseconds since the Unix epoch."""

XLOG_HEADER_SIZE: Final = 25
"""Bytes before an XLogData's payload: the tag, WAL start, WAL end, send time."""

xlog_wal_start = struct.Struct("!xQ").unpack_from
"""``xlog_wal_start(frame) -> (wal_start,)``: the one read of an XLogData's WAL start (the tag,
included, is not checked). A bound C function, so the source's hot loop calls it at the cost of
inline code and makes no int for fields it does not use; :func:`parse_xlog_data` adds the
checks, the other fields and the frame object."""

_XLOG_REST = struct.Struct("!Qq")  # WAL end, send time: after the tag and the WAL start
_KEEPALIVE = struct.Struct("!QqB")
_STATUS = struct.Struct("!cQQQqB")
_MAX_LSN = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class XLogData:
    """A WAL data frame (``'w'``).

    Attributes:
        wal_start: LSN of the WAL record the payload comes from; 0 when the server sends
            several messages for one record (``Relation``/``Type`` before a change, ``Begin``
            before an ``Origin``), so acknowledge positions from the pgoutput messages.
        wal_end: the server's current end of WAL.
        server_time_us: the server's clock when sending, microseconds since 2000-01-01 UTC.
        payload: one pgoutput message; a view into the frame, not a copy.
    """

    wal_start: int
    wal_end: int
    server_time_us: int
    payload: memoryview


@dataclass(frozen=True, slots=True)
class PrimaryKeepalive:
    """A primary keepalive (``'k'``).

    Attributes:
        wal_end: the server's current end of WAL.
        server_time_us: the server's clock, microseconds since 2000-01-01 UTC.
        reply_requested: the server disconnects soon unless a status update answers now.
    """

    wal_end: int
    server_time_us: int
    reply_requested: bool


ReplicationMessage = XLogData | PrimaryKeepalive


def parse_xlog_data(data: bytes | bytearray | memoryview) -> XLogData:
    """Parse a ``'w'`` CopyData message (tag included).

    Raises:
        ProtocolError: not an XLogData message, or too short.
    """
    view = memoryview(data)
    if len(view) < XLOG_HEADER_SIZE or view[0] != ord("w"):
        raise ProtocolError(f"not an XLogData message: {bytes(view[:25])!r}")
    end, ts = _XLOG_REST.unpack_from(view, 9)
    return XLogData(xlog_wal_start(view)[0], end, ts, view[XLOG_HEADER_SIZE:])


def parse_keepalive(data: bytes | bytearray | memoryview) -> PrimaryKeepalive:
    """Parse a ``'k'`` CopyData message (tag included).

    Raises:
        ProtocolError: not a keepalive message, or too short.
    """
    view = memoryview(data)
    if len(view) < 1 + _KEEPALIVE.size or view[0] != ord("k"):
        raise ProtocolError(f"not a primary keepalive message: {bytes(view[:18])!r}")
    wal_end, ts, reply = _KEEPALIVE.unpack_from(view, 1)
    return PrimaryKeepalive(wal_end, ts, reply == 1)


def parse_copy_data(data: bytes | bytearray | memoryview) -> ReplicationMessage:
    """Parse one CopyData message of the replication stream by its tag.

    Raises:
        ProtocolError: unknown tag or truncated message.
    """
    if not data:
        raise ProtocolError("empty CopyData message")
    tag = data[0]
    if tag == ord("w"):
        return parse_xlog_data(data)
    if tag == ord("k"):
        return parse_keepalive(data)
    raise ProtocolError(f"unknown replication CopyData tag {tag:#04x}")


def standby_status_update(
    write_lsn: Lsn,
    flush_lsn: Lsn,
    apply_lsn: Lsn,
    client_time_us: int | None = None,
    *,
    reply_requested: bool = False,
) -> bytes:
    """Build a standby status update (``'r'``).

    Args:
        write_lsn: last WAL byte + 1 received.
        flush_lsn: last WAL byte + 1 durably stored; the server may recycle WAL before it, so
            report only positions whose records are durable in the log.
        apply_lsn: last WAL byte + 1 applied.
        client_time_us: microseconds since 2000-01-01 UTC; now when omitted.
        reply_requested: ask the server to answer at once with a keepalive.

    Returns:
        The CopyData payload to send.
    """
    for name, lsn in (("write", write_lsn), ("flush", flush_lsn), ("apply", apply_lsn)):
        if not 0 <= lsn <= _MAX_LSN:
            raise ValueError(f"{name} LSN out of range: {lsn}")
    ts = now_pg_us() if client_time_us is None else client_time_us
    return _STATUS.pack(b"r", write_lsn, flush_lsn, apply_lsn, ts, 1 if reply_requested else 0)


def pg_time_to_unix_ms(us_since_2000: int) -> int:
    """PostgreSQL timestamp (µs since 2000-01-01 UTC) to milliseconds since the Unix epoch."""
    # Floor division: a negative sub-millisecond remainder still belongs to the earlier ms.
    return (us_since_2000 + PG_EPOCH_UNIX_US) // 1000


def unix_ms_to_pg_time(unix_ms: int) -> int:
    """Milliseconds since the Unix epoch to PostgreSQL's µs since 2000-01-01 UTC."""
    return unix_ms * 1000 - PG_EPOCH_UNIX_US


def now_pg_us() -> int:
    """The current time as PostgreSQL counts it: µs since 2000-01-01 UTC."""
    return time.time_ns() // 1000 - PG_EPOCH_UNIX_US
