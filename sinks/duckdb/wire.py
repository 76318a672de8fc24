"""Envelope values to the forms DuckDB's staging reads, under every envelope encoding.

The staging (:mod:`sinks.duckdb.stage`) parses JSON values straight into DuckDB types: decimal
strings, ISO dates and times, base64 for ``BLOB``, JSON documents. Debezium's other encodings
write some columns otherwise (base64 unscaled decimals, epoch days, µs, hex bytes, a JSON
document as text); those columns are decoded first with :func:`cdc.records.values.decoder` and
staged as text DuckDB reads, so the table holds the same values whichever options wrote the records.
Columns whose values DuckDB reads as they come stay on the fast path (no Python per value).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import functools
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

import orjson

from cdc.envelope.options import EnvelopeOptions
from cdc.records.values import Interval, decoder, normalize_type

PyConvert = Callable[[list[Any]], list[Any]]


class BadWireValue(ValueError):
    """A value its column's decoder refused; ``index`` is its row in the column, ``reason`` why
    (a ``Decimal``'s refusal reads ``[<class 'decimal.ConversionSyntax'>]``: said in words)."""

    def __init__(self, index: int, cause: Exception) -> None:
        reason = "not a number" if isinstance(cause, decimal.InvalidOperation) else str(cause)
        super().__init__(reason)
        self.index = index
        self.reason = reason or type(cause).__name__


_NUMERIC: Final = re.compile(r"(?:numeric|decimal)(?:\(.*\))?")
_TIME: Final = re.compile(r"(?:time|timestamp)(?:\(\d+\))?(?: without time zone)?")


@functools.lru_cache(maxsize=1024)
def wire_conversion(
    source_type: str, duck_type: str, options: EnvelopeOptions | None
) -> PyConvert | None:
    """The conversion of a column's values before staging, or ``None`` where none is needed."""
    base = normalize_type(source_type)
    while base.endswith("[]"):
        base = base[:-2].rstrip()
    if not _needs_decoding(base, duck_type, options):
        return None
    decode = decoder(source_type, options)
    stage = {"json": _document, "jsonb": _document, "hstore": _json_text}.get(base, _staged)
    return functools.partial(_convert, decode, stage)


def _needs_decoding(base: str, duck_type: str, options: EnvelopeOptions | None) -> bool:
    if base in ("json", "jsonb"):  # the document's text, whichever encoding (legacy nests it)
        return True
    if options is None:  # the legacy encoding: what the staging was written for
        return False
    if _NUMERIC.fullmatch(base):
        return options.decimal_handling_mode != "string" or duck_type.startswith("VARCHAR")
    if base == "date":
        return True  # epoch days, or "2024-02-29Z", which DuckDB's DATE refuses
    if _TIME.fullmatch(base):
        return options.time_precision_mode != "isostring"
    if base.startswith("interval"):
        return options.interval_handling_mode == "numeric"
    if base == "bytea":
        return options.binary_handling_mode in ("hex", "base64-url-safe")
    if base == "money":  # a VARCHAR (a legacy log holds "$1,234.56"): the decimal's digits
        return options.decimal_handling_mode != "string"
    if base == "hstore":  # text under json; an object under map, kept as the same text
        return options.hstore_handling_mode == "map"
    return False


def _convert(
    decode: Callable[[Any], Any], stage: Callable[[Any], Any], column: list[Any]
) -> list[Any]:
    out = []
    for index, value in enumerate(column):
        try:
            out.append(None if value is None else stage(decode(value)))
        # ArithmeticError: Decimal refuses text with InvalidOperation, which is no ValueError.
        except (ValueError, TypeError, KeyError, IndexError, ArithmeticError) as exc:
            raise BadWireValue(index, exc) from exc
    return out


def _document(value: Any) -> Any:
    """``json``: the document's text (:func:`cdc.records.values.decoder` gives text in every
    encoding), staged as text and cast to JSON, so JSON's ``null`` stays a document, not SQL NULL;
    in a ``json[]`` each element goes into the staged list as the JSON it is."""
    if isinstance(value, list):
        return [_element(v) for v in value]
    return value


def _element(value: Any) -> Any:
    if isinstance(value, list):
        return [_element(v) for v in value]
    return orjson.Fragment(value) if isinstance(value, str) else value


def _json_text(value: Any) -> Any:
    """``hstore`` under ``map``: the object as the JSON text ``json`` mode writes."""
    if isinstance(value, list):
        return [_json_text(v) for v in value]
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _staged(value: Any) -> Any:
    """A canonical value (:mod:`cdc.records.values`) as DuckDB's staging reads it."""
    if isinstance(value, list):
        return [None if v is None else _staged(v) for v in value]
    if isinstance(value, Decimal):  # plain digits, as PostgreSQL prints a numeric
        return format(value, "f") if value.is_finite() else str(value)
    if isinstance(value, dt.date | dt.time):  # datetime too
        return value.isoformat()
    if isinstance(value, Interval):
        return f"{value.months} months {value.days} days {value.microseconds} microseconds"
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value
