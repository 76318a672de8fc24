"""Connecting to the target, and psycopg's errors in the framework's terms.

Every message names the server by its redacted DSN and has the driver's text redacted against
the DSN (libpq can quote a piece of it): no password reaches a log or an error.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pe

from cdc.config.pipeline import secret_value
from cdc.contracts.errors import SinkError, SinkFatal, SinkUnavailable
from cdc.support.redact import redact
from sinks.postgres.config import PostgresSinkConfig

#: SQLSTATE classes that pass: a connection lost, the server shutting down or out of resources,
#: a serialization failure or deadlock (the transaction is rolled back; a retry applies it).
_TRANSIENT_CLASSES = ("08", "53", "57", "40")
#: SQLSTATEs of those classes that no retry mends: a bad password, no such database.
_PERMANENT = frozenset({"28000", "28P01", "3D000", "57014"})


def dsn_of(config: PostgresSinkConfig) -> str:
    return secret_value(config.dsn)


def where(config: PostgresSinkConfig) -> str:
    """The target as messages name it: the redacted DSN."""
    return redact(dsn_of(config))


def connect(config: PostgresSinkConfig) -> psycopg.Connection[Any]:
    """A connection to the target in UTC and ISO styles (what the reader parses).

    Raises:
        SinkUnavailable: the server cannot be reached now.
        SinkFatal: it refuses the credentials, or the database does not exist.
    """
    try:
        conn = psycopg.connect(
            dsn_of(config),
            connect_timeout=config.connect_timeout_s,
            application_name=f"cdc-sink-{config.name}",
        )
    except psycopg.Error as exc:
        raise translate(exc, config, "connecting") from None
    # Settings the reader's parsing and the hashed keys rely on, whatever the server's are.
    conn.execute("SET TIME ZONE 'UTC'")
    conn.execute("SET DateStyle = 'ISO, YMD'")
    conn.execute("SET IntervalStyle = 'iso_8601'")
    # Floats printed exactly: a keyless table's key hash is taken over its values' text.
    conn.execute("SET extra_float_digits = 1")
    conn.commit()
    return conn


def translate(exc: BaseException, config: PostgresSinkConfig, doing: str) -> SinkError:
    """The framework's error for a psycopg error met while ``doing``."""
    dsn = dsn_of(config)
    text = redact(first_line(exc), dsn)
    message = f"PostgreSQL sink {config.name} at {redact(dsn)}: {doing}: {text}"
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, pe.InsufficientPrivilege):
        return SinkFatal(f"{message}. Fix: GRANT CREATE ON SCHEMA to the sink's user")
    if state in _PERMANENT:
        return SinkFatal(message)
    if state.startswith(_TRANSIENT_CLASSES) or _lost_connection(exc, state):
        return SinkUnavailable(message)
    return SinkFatal(message)


def _lost_connection(exc: BaseException, state: str) -> bool:
    # A failed connect and a dropped socket carry no SQLSTATE; a bad password does ("28P01"),
    # but libpq's "password authentication failed" on connect comes without one.
    if state or not isinstance(exc, psycopg.OperationalError):
        return False
    text = str(exc).lower()
    return "authentication" not in text and "does not exist" not in text


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
