"""Translate libpq and psycopg failures into the framework's errors, naming the culprit."""

from __future__ import annotations

from cdc.errors import SourceError, SourceFatal, SourceUnavailable

#: Connection failures that retrying cannot fix: the credentials or the target are wrong.
_FATAL_CONNECT_MARKERS = (
    "password authentication failed",
    "no password supplied",
    "authentication failed",
    "no pg_hba.conf entry",
    "does not exist",
    "permission denied",
    "must have replication",
    "must be superuser or replication",
    "invalid connection option",
    "invalid dsn",
    'missing "="',
    "could not translate host name",
)


def connect_error(where: str, message: str) -> SourceError:
    """The error for a failed connection attempt.

    Args:
        where: the redacted DSN, so the message names the server without its password.
        message: libpq's message.

    Returns:
        ``SourceFatal`` for bad credentials, unknown database or role, refused by
        ``pg_hba.conf``; ``SourceUnavailable`` (retried) for anything that may heal.
    """
    text = " ".join(message.split())
    lowered = text.lower()
    if any(marker in lowered for marker in _FATAL_CONNECT_MARKERS):
        return SourceFatal(f"cannot connect to PostgreSQL at {where}: {text}")
    return SourceUnavailable(f"PostgreSQL at {where} is unreachable: {text}")


def lost(where: str, message: str) -> SourceUnavailable:
    """The error for a connection that broke after it was established (retried)."""
    text = " ".join(message.split()) or "connection closed"
    return SourceUnavailable(f"lost the replication connection to {where}: {text}")
