"""Source column types as Iceberg types, and values both ways: pure, no catalog.

A value is first decoded by its source type (:func:`cdc.records.values.decoder`: ``Decimal``,
``date``, aware UTC ``datetime``...), whatever envelope wrote it, then stored as the Iceberg type
holds it. Types Iceberg has no type for (``interval``, ``timetz``, ``uuid``, ``json``,
unconstrained ``numeric``, enums...) are stored as text that the same decoder reads back, so
``cdc verify`` compares them by meaning. One-dimensional arrays of a mapped type are lists.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

import orjson
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.records.values import Interval, decoder, normalize_type

Store = Callable[[Any], Any]

_NUMERIC: Final = re.compile(r"(?:numeric|decimal)\((\d+)(?:,\s*(\d+))?\)")
_TIMESTAMP: Final = re.compile(r"timestamp(?:\(\d\))?( with(?:out)? time zone)?")
_TIME: Final = re.compile(r"time(?:\(\d\))?( without time zone)?")
_SCALARS: Final[dict[str, IcebergType]] = {
    "smallint": IntegerType(),
    "int2": IntegerType(),
    "integer": IntegerType(),
    "int": IntegerType(),
    "int4": IntegerType(),
    "bigint": LongType(),
    "int8": LongType(),
    "oid": LongType(),
    "real": FloatType(),
    "float4": FloatType(),
    "double precision": DoubleType(),
    "float8": DoubleType(),
    "boolean": BooleanType(),
    "bool": BooleanType(),
    "date": DateType(),
    "bytea": BinaryType(),
}
#: Iceberg's widest decimal.
MAX_PRECISION: Final = 38


class Unstorable(ValueError):
    """A value its column's Iceberg type cannot hold (``infinity``, a NaN decimal...)."""


def iceberg_type(source_type: str, element_id: int = 0) -> IcebergType:
    """The Iceberg type of a source column type; ``element_id`` numbers a list's element."""
    name = normalize_type(source_type)
    if name.endswith("[]"):
        element = iceberg_type(name[:-2])
        if isinstance(element, ListType):  # never: PostgreSQL names an n-D array as 1-D
            return StringType()
        return ListType(element_id, element, element_required=False)
    return _scalar(name)


def _scalar(name: str) -> IcebergType:
    found = _SCALARS.get(name)
    if found is not None:
        return found
    numeric = _NUMERIC.fullmatch(name)
    if numeric is not None and int(numeric.group(1)) <= MAX_PRECISION:
        return DecimalType(int(numeric.group(1)), int(numeric.group(2) or 0))
    stamp = _TIMESTAMP.fullmatch(name)
    if stamp is not None:
        return TimestamptzType() if stamp.group(1) == " with time zone" else TimestampType()
    if _TIME.fullmatch(name) is not None:
        return TimeType()
    return StringType()


def storer(source_type: str, options: EnvelopeOptions | None) -> Store:
    """The function from an envelope value of ``source_type`` to what its Iceberg column holds.

    The function raises :class:`Unstorable` for a value the column type cannot hold.
    """
    decode = decoder(source_type, options)
    kind = iceberg_type(source_type)
    if isinstance(kind, ListType):
        element = _converter(kind.element_type)
        return lambda v: None if v is None else _list(decode(v), element)
    convert = _converter(kind)
    return lambda v: None if v is None else convert(decode(v))


def _list(values: Any, element: Callable[[Any], Any]) -> list[Any]:
    if not isinstance(values, list):
        raise Unstorable(f"not an array: {type(values).__name__}")
    if any(isinstance(v, list) for v in values):
        raise Unstorable("a multi-dimensional array (an Iceberg list column is one-dimensional)")
    return [None if v is None else element(v) for v in values]


def _converter(kind: IcebergType) -> Callable[[Any], Any]:
    """Checks a decoded value against what ``kind`` holds (pyarrow does the conversion)."""
    if isinstance(kind, StringType):
        return as_text
    if isinstance(kind, DecimalType):
        return _decimal
    if isinstance(kind, DateType | TimestampType | TimestamptzType | TimeType):
        wanted = {
            DateType: dt.date,
            TimestampType: dt.datetime,
            TimestamptzType: dt.datetime,
            TimeType: dt.time,
        }[type(kind)]
        return lambda v: _typed(v, wanted)
    if isinstance(kind, FloatType | DoubleType):
        return _float
    exact: type = bool if isinstance(kind, BooleanType) else int
    if isinstance(kind, BinaryType):
        exact = bytes
    return lambda v: _exact(v, exact)


def _exact(value: Any, wanted: type) -> Any:
    # type(), not isinstance: True is an int, and pyarrow's message would quote the value.
    if type(value) is not wanted:
        raise Unstorable(f"a {type(value).__name__} value in a {wanted.__name__} column")
    return value


def _float(value: Any) -> Any:
    if type(value) not in (float, int):
        raise Unstorable(f"a {type(value).__name__} value in a float column")
    return value


def _typed(value: Any, wanted: type) -> Any:
    if not isinstance(value, wanted):  # 'infinity', a BC date, 24:00:00: kept as the source's text
        # The value is not named: its column may be masked.
        raise Unstorable(f"a {type(value).__name__} value with no Iceberg {wanted.__name__}")
    return value


def _decimal(value: Any) -> Decimal:
    if not isinstance(value, Decimal) or not value.is_finite():
        raise Unstorable("a value with no Iceberg decimal (NaN, infinity or not a number)")
    return value


def as_text(value: Any) -> str:
    """A decoded value as the text the source type's decoder reads back."""
    if isinstance(value, str):
        return value
    if isinstance(value, Interval):
        seconds = Decimal(value.microseconds) / 1_000_000
        return f"P{value.months}M{value.days}DT{seconds}S"
    if isinstance(value, dt.time | dt.date):
        return value.isoformat()
    if isinstance(value, bool | int | float | Decimal):
        return str(value)
    return orjson.dumps(value).decode()


def reader(source_type: str) -> Callable[[Any], Any]:
    """The function from a stored value back to the source value it means (``cdc verify``)."""
    decode = decoder(source_type, READABLE)
    return lambda v: None if v is None else decode(v)
