"""Why a value does not convert."""

from __future__ import annotations

from typing import Final

from cdc.contracts.errors import RecordError

__all__ = ["CONVERSION_FAILURES", "ConversionError"]


class ConversionError(RecordError):
    """A column value cannot be converted; names the type, the value (cut to 100 characters)
    and, when known, the column."""

    def __init__(self, type_name: str, value: str, reason: str, column: str | None = None):
        self.type_name = type_name
        self.value = value[:100]
        self.reason = reason
        self.column = column
        where = f" in column {column!r}" if column is not None else ""
        super().__init__(f"cannot convert {type_name} value {self.value!r}{where}: {reason}")


CONVERSION_FAILURES: Final = (ValueError, LookupError, ArithmeticError, TypeError)
"""What a scalar converter raises on bad input."""
