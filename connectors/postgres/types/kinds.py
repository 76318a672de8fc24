"""The kinds of value a column's converter produces, as the native row encoder knows them."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["TypeKind"]


class TypeKind(IntEnum):
    """What kind of value a type's text converts to.

    The codes are those of ``Kind::from_code`` in ``connectors/postgres/native/src/lib.rs``:
    the native encoder writes the JSON of the fast kinds itself and calls the Python converter
    for :attr:`PYTHON`. ``tests/unit/test_pg_type_kinds.py`` holds the two lists together.
    """

    TEXT = 0
    """The text as sent (a JSON string)."""
    INT = 1
    BOOL = 2
    TIMESTAMPTZ = 3
    TIMESTAMP = 4
    DATE = 5
    TIME = 6
    PYTHON = 7
    """Any other converter: only Python knows its value."""
    JSONB = 8
    """``jsonb``: the server's normalised JSON text (unlike ``json``, which is kept as typed)."""
