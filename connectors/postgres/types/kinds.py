"""The kinds of value a column's converter produces, as the native row encoder knows them."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["TypeKind"]


class TypeKind(IntEnum):
    """What kind of value a column's text converts to.

    The codes are those of ``Kind::from_code`` in ``connectors/postgres/native/src/lib.rs``:
    the native encoder writes the JSON of the fast kinds itself and calls the Python converter
    for :attr:`PYTHON`. ``tests/unit/test_pg_type_kinds.py`` holds the two lists together. The
    forms are Debezium's (``tests/debezium/OBSERVED.md``).
    """

    TEXT = 0
    """The text as sent (a JSON string): text, uuid, enums, ``json``/``jsonb`` (Debezium's
    ``io.debezium.data.Json`` is a string holding the server's text)."""
    INT = 1
    BOOL = 2
    TIMESTAMPTZ = 3
    """``timestamptz`` in every mode: UTC, always six fraction digits, ``Z``."""
    ISO_TIMESTAMP = 4
    """``timestamp`` under ``isostring``: ``'YYYY-MM-DDTHH:MM:SS[.f]Z'``."""
    ISO_DATE = 5
    """``date`` under ``isostring``: ``'YYYY-MM-DDZ'``."""
    ISO_TIME = 6
    """``time`` under ``isostring``: the text with ``Z``."""
    PYTHON = 7
    """Any other converter: only Python knows its value."""
    NUMERIC_STRING = 8
    """``numeric`` under ``decimal.handling.mode=string``: the text, ``NaN`` as ``"NAN"``."""
