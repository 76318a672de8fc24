"""Translate libpq and psycopg failures into the framework's errors, naming the culprit."""

from __future__ import annotations

import psycopg

from cdc.contracts.errors import SourceError, SourceFatal, SourceUnavailable

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


class QueryRefused(SourceFatal):
    """The server refused a read of a table that hides values; the message is a summary
    (:func:`server_error`), never the server's own words."""


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


#: SQLSTATE classes whose messages quote no stored value, only the statement's own text or
#: names: syntax and access rules (``42``), feature not supported (``0A``), invalid transaction
#: state (``25``: a write refused in a read-only transaction), operator intervention (``57``: a
#: timeout), resources (``53``), connection (``08``), authorization (``28``), unknown database or
#: schema (``3D``, ``3F``).
_QUOTES_NO_VALUE = frozenset(("42", "0A", "25", "57", "53", "08", "28", "3D", "3F"))

#: What a summary says for the classes that may quote a value.
_GENERIC = {
    "22": "a value could not be converted or computed (a data exception)",
    "23": "an integrity constraint was violated",
    "P0": "a PL/pgSQL function raised an error",
}


def server_error(exc: psycopg.Error, hides_values: bool) -> str:
    """A server error as a message may show it, never with its DETAIL (which can hold a row).

    Where the table hides values (masks, left-out columns, a row filter: ``hides_values``), an
    error of a class that can quote a value (``invalid input syntax for type integer:
    "SSN-RAW-1"`` is a data exception about a masked value, of a row the row filter leaves out)
    is summarised: its SQLSTATE and a generic message.
    """
    code = exc.sqlstate or ""
    primary = " ".join((exc.diag.message_primary or type(exc).__name__).split())
    if not hides_values or code[:2] in _QUOTES_NO_VALUE:
        return f"{primary} (SQLSTATE {code})" if code else primary
    generic = _GENERIC.get(code[:2], "the server refused it")
    return (
        f"{generic} (SQLSTATE {code}; the server's message is not shown: it can quote a value "
        "the table's masks, left-out columns or row filter hide)"
    )
