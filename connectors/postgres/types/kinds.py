"""The kinds of value a column's converter produces, and the masks, as the native row encoder
knows them."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["MaskKind", "TypeKind"]


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
    """``timestamptz`` in every mode: UTC, six fraction digits (its default precision), ``Z``."""
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
    TIMESTAMPTZ_P0 = 9
    """``timestamptz(0)``: as :attr:`TIMESTAMPTZ`, no fraction."""
    TIMESTAMPTZ_P1 = 10
    """``timestamptz(1)``: as :attr:`TIMESTAMPTZ`, one fraction digit; and so on to 5."""
    TIMESTAMPTZ_P2 = 11
    TIMESTAMPTZ_P3 = 12
    TIMESTAMPTZ_P4 = 13
    TIMESTAMPTZ_P5 = 14

    @staticmethod
    def timestamptz(width: int) -> TypeKind:
        """The kind of ``timestamptz(width)`` (6: the type without a precision)."""
        return TypeKind.TIMESTAMPTZ if width == 6 else TypeKind(TypeKind.TIMESTAMPTZ_P0 + width)


class MaskKind(IntEnum):
    """The built-in masks (:mod:`cdc.transforms.masks`) the native encoder computes itself, by the
    names of
    :attr:`cdc.transforms.masks.Mask.kind`; a ``plugin`` mask is a :attr:`TypeKind.PYTHON`
    converter.

    The codes are those of ``Mask::from_plan`` in ``connectors/postgres/native/src/lib.rs``
    (``tests/unit/test_pg_type_kinds.py`` holds the two lists together).
    """

    HASH = 0
    """HMAC-SHA256 of the text keyed by :attr:`cdc.transforms.masks.Mask.key`, in lower-case hex."""
    REDACT = 1
    NULL = 2
    KEEP_LAST = 3
    """Every character but the last :attr:`cdc.transforms.masks.Mask.n` replaced by ``*``."""
