"""PostgreSQL type names to DuckDB types, how values are staged, and which changes widen.

Pure functions over the type names a source publishes (see :class:`cdc.contracts.schema.Column`), so
the mapping is tested without a database. Values reach DuckDB as JSON text and are cast there in
bulk; a few types need help on the way (see :func:`conversion`).

Mapping decisions that lose no data:

* ``numeric(p,s)`` with ``p <= 38`` and ``0 <= s <= p`` becomes ``DECIMAL(p,s)``; a value DECIMAL
  cannot hold (``NaN``, ``Infinity``) fails its record (dead-letter or stop, by policy).
* ``numeric`` without precision, ``p > 38`` or a negative scale becomes ``VARCHAR`` holding the
  exact text, PostgreSQL's (``NaN``, ``Infinity`` and ``-Infinity`` included, whichever names
  the envelope gives them): DuckDB's widest decimal would round such values.
* ``json``/``jsonb`` become ``JSON``, staged as text and cast, so JSON's ``null`` is kept as a
  document, apart from SQL NULL.
* enums, domains and any type not listed become ``VARCHAR`` with the source's text.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import duckdb
import orjson

from cdc.records.values import far_iso

MAX_DECIMAL_PRECISION: Final = 38


def _lambda_syntax() -> str:
    """DuckDB 1.3 brought ``lambda x: ...``; 2.0 refuses the older ``x -> ...``."""
    major, minor = (int(part) for part in duckdb.__version__.split(".")[:2])
    return "lambda x: from_base64(x)" if (major, minor) >= (1, 3) else "x -> from_base64(x)"


_FROM_BASE64: Final = _lambda_syntax()

_SIMPLE: Final[dict[str, str]] = {
    "smallint": "SMALLINT",
    "int2": "SMALLINT",
    "integer": "INTEGER",
    "int": "INTEGER",
    "int4": "INTEGER",
    "bigint": "BIGINT",
    "int8": "BIGINT",
    "oid": "BIGINT",
    "real": "REAL",
    "float4": "REAL",
    "double precision": "DOUBLE",
    "float8": "DOUBLE",
    "boolean": "BOOLEAN",
    "bool": "BOOLEAN",
    "bytea": "BLOB",
    "date": "DATE",
    "uuid": "UUID",
    "json": "JSON",
    "jsonb": "JSON",
}
_NUMERIC: Final = re.compile(r"(?:numeric|decimal)(?:\((\d+)(?:,\s*(-?\d+))?\))?")
_TEMPORAL: Final = re.compile(
    r"(time|timestamp)(?:\((\d+)\))?(?: (with|without) time zone)?"
    r"|(timetz|timestamptz)(?:\((\d+)\))?"
)
_INTERVAL: Final = re.compile(r"interval(?: [a-z ]+?)?(?:\((\d+)\))?")
_STRING: Final = re.compile(r"(character varying|varchar|character|char|bpchar|text)(?:\((\d+)\))?")
_INTEGER_RANK: Final = {"SMALLINT": 1, "INTEGER": 2, "BIGINT": 3}
_INTEGER_DIGITS: Final = {"SMALLINT": 5, "INTEGER": 10, "BIGINT": 19}


def normalize(source_type: str) -> str:
    """Lower-case, single-spaced, without the quotes ``format_type`` puts on some names."""
    return " ".join(source_type.strip().lower().replace('"', "").split())


def duckdb_type(source_type: str) -> str:
    """The DuckDB type for a PostgreSQL type name (``""`` for a schemaless ``JSON`` document)."""
    name = normalize(source_type)
    if not name:
        return "JSON"
    if name.endswith("[]"):
        element = name
        dims = 0
        while element.endswith("[]"):
            element, dims = element[:-2].rstrip(), dims + 1
        if dims > 1 and element == "bytea":
            return "JSON"  # nested base64 lists: decoding them in SQL is not worth it
        return duckdb_type(element) + "[]" * dims
    if name in _SIMPLE:
        return _SIMPLE[name]
    numeric = _NUMERIC.fullmatch(name)
    if numeric is not None:
        return _decimal(numeric.group(1), numeric.group(2))
    temporal = _TEMPORAL.fullmatch(name)
    if temporal is not None:
        return _temporal(temporal)
    if _INTERVAL.fullmatch(name):
        return "INTERVAL"
    return "VARCHAR"


def _decimal(precision: str | None, scale: str | None) -> str:
    if precision is None:
        return "VARCHAR"
    p, s = int(precision), int(scale or 0)
    if p > MAX_DECIMAL_PRECISION or s < 0 or s > p:
        return "VARCHAR"
    return f"DECIMAL({p},{s})"


def _temporal(match: re.Match[str]) -> str:
    base, _, zone, short, _ = match.groups()
    if short is not None:
        return "TIMETZ" if short == "timetz" else "TIMESTAMPTZ"
    with_zone = zone == "with"
    if base == "time":
        return "TIMETZ" if with_zone else "TIME"
    return "TIMESTAMPTZ" if with_zone else "TIMESTAMP"


# -- staging -------------------------------------------------------------------------------------

PyConvert = Callable[[list[Any]], list[Any]]


@dataclass(frozen=True, slots=True)
class Conversion:
    """How one column's JSON values become DuckDB values.

    The fast path parses each column straight into its type with ``from_json_strict`` (which
    fails on any value it cannot convert, where ``from_json`` would quietly give NULL). After a
    failure, the check path re-reads the values as text and tries each cast on its own, to name
    the value to blame.

    Attributes:
        stage: ``from_json_strict`` structure of one value (a type name, or ``[...]`` for lists).
        expr: SQL turning the staged value ``{c}`` into the column's type.
        check_stage: structure for the check path (text or JSON).
        check: SQL casting the check path's ``{c}``; ``TRY`` of it is NULL for a bad value.
        python: a conversion of a whole column applied in Python first, for the few formats
            DuckDB cannot parse (a column at a time: a call per value shows on the hot path).
    """

    stage: Any
    expr: str
    check_stage: str
    check: str
    python: PyConvert | None = None


def conversion(duck_type: str, source_type: str = "") -> Conversion:
    """How to stage and cast values of ``duck_type`` (a column of ``source_type``)."""
    if duck_type.endswith("[]"):
        return _list_conversion(duck_type)
    if duck_type == "JSON" and normalize(source_type) in ("json", "jsonb"):
        # Staged as the document's text and cast: parsed as JSON, a document that is JSON's
        # null would become SQL NULL, and the two are different values in PostgreSQL.
        return Conversion("VARCHAR", "CAST({c} AS JSON)", "VARCHAR", "CAST({c} AS JSON)")
    if duck_type in ("VARCHAR", "JSON"):
        return Conversion(duck_type, "{c}", duck_type, "{c}")
    if duck_type == "BLOB":
        return Conversion("VARCHAR", "from_base64({c})", "VARCHAR", "from_base64({c})")
    return Conversion(
        duck_type, "{c}", "VARCHAR", f"CAST({{c}} AS {duck_type})", _PYTHON.get(duck_type)
    )


def _list_conversion(duck_type: str) -> Conversion:
    element, dims = duck_type.split("[", 1)[0], duck_type.count("[]")
    python = _PYTHON.get(element)
    if element == "BLOB":
        blobs = f"list_transform({{c}}, {_FROM_BASE64})"
        check = f"list_transform(CAST({{c}} AS VARCHAR[]), {_FROM_BASE64})"
        return Conversion(["VARCHAR"], blobs, "JSON", check)
    stage: Any = element
    for _ in range(dims):
        stage = [stage]
    return Conversion(stage, "{c}", "JSON", f"CAST({{c}} AS {duck_type})", python)


def document_key(key: Any) -> str:
    """A schemaless table's key as canonical JSON text, so equal keys compare equal."""
    return orjson.dumps(key, option=orjson.OPT_SORT_KEYS).decode()


_ISO_DURATION: Final = re.compile(
    r"(-)?P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)W)?(?:(-?\d+)D)?"
    r"(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d+)?)S)?)?"
)
_DURATION_UNITS: Final = ("years", "months", "weeks", "days", "hours", "minutes", "seconds")


def _interval_value(value: Any) -> Any:
    if isinstance(value, list):
        return [_interval_value(v) for v in value]
    if isinstance(value, str):
        return iso_duration_to_duckdb(value)
    return value


def _bc_value(value: Any, zone: str = "") -> Any:
    if isinstance(value, list):
        return [_bc_value(v, zone) for v in value]
    if isinstance(value, str) and value[:1] in "+-":
        # ISO text with a signed year (isostring): Debezium's sentinels for the infinities,
        # BC (``-0043-03-15``) and years past 9999 (``+12345-01-01``), which DuckDB would
        # refuse or misread: PostgreSQL's text (``zone``: ``+00`` for a UTC instant).
        value = far_iso(value, zone)
    if isinstance(value, str) and value.endswith(" BC"):
        return bc_to_duckdb(value)
    return value


def bc_to_duckdb(text: str) -> str:
    """PostgreSQL's ``'0044-03-15 12:00:00 BC'`` as DuckDB reads it: ``'0044-03-15 (BC) 12:00:00'``.

    DuckDB would otherwise take the trailing ``BC`` for noise and store the year AD.
    """
    day, space, clock = text[:-3].partition(" ")
    return f"{day} (BC){space}{clock}"


def iso_duration_to_duckdb(text: str) -> str:
    """``'P1Y2M3DT4H5M6.5S'`` -> ``'1 years 2 months 3 days 4 hours 5 minutes 6.5 seconds'``.

    Each part keeps its sign, as PostgreSQL (and DuckDB) keep months, days and time apart. Text
    that is not an ISO-8601 duration passes through for DuckDB to parse or refuse.
    """
    match = _ISO_DURATION.fullmatch(text)
    if match is None or text in ("P", "PT"):
        return text
    negate = match.group(1) == "-"
    parts = []
    for value, unit in zip(match.groups()[1:], _DURATION_UNITS, strict=True):
        if value is not None:
            parts.append(f"{'-' if negate else ''}{value} {unit}".replace("--", ""))
    return " ".join(parts) or "0 seconds"


def _intervals(column: list[Any]) -> list[Any]:
    return [None if v is None else _interval_value(v) for v in column]


def _bc_dates(column: list[Any], zone: str = "") -> list[Any]:
    if not _may_need_rewriting(column):
        return column
    # Nearly every value is a plain string that does not end in BC: keep that path inline.
    return [
        (bc_to_duckdb(v) if v.endswith(" BC") else v)
        if v.__class__ is str and v[:1] not in "+-"
        else _bc_value(v, zone)
        for v in column
    ]


def _may_need_rewriting(column: list[Any]) -> bool:
    """Whether a value of ``column`` (or of its lists) is text :func:`_bc_value` may rewrite:
    one that starts with a sign (or is empty) or ends in ``BC``. The column's JSON, made in C,
    then holds ``"+``, ``"-``, ``""`` or `` BC"`` (escaped text can only raise a false alarm),
    so nearly every batch skips the loop a value."""
    try:
        text = orjson.dumps(column)
    except orjson.JSONEncodeError:
        return True
    return b'"-' in text or b'"+' in text or b' BC"' in text or b'""' in text


def _bc_instants(column: list[Any]) -> list[Any]:
    return _bc_dates(column, "+00")


_PYTHON: Final[dict[str, PyConvert]] = {
    "INTERVAL": _intervals,
    "DATE": _bc_dates,
    "TIMESTAMP": _bc_dates,
    "TIMESTAMPTZ": _bc_instants,
}

# -- schema evolution ----------------------------------------------------------------------------


def is_widening(old: str, new: str) -> bool:
    """Whether a column's source type change from ``old`` to ``new`` keeps every value.

    Widening: ``smallint`` -> ``integer`` -> ``bigint``, an integer to a numeric with room
    for its digits, ``real`` -> ``double precision``, ``numeric(p,s)`` -> ``numeric(p2,s2)``
    with ``s2 >= s`` and ``p2 - s2 >= p - s`` (or unconstrained), ``varchar(n)`` ->
    ``varchar(m >= n)``/``text``, ``json`` <-> ``jsonb``, a higher time precision, and the
    same rules element-wise for arrays.
    """
    a, b = normalize(old), normalize(new)
    if a == b:
        return True
    if a.endswith("[]") and b.endswith("[]"):
        return is_widening(a[:-2], b[:-2])
    da, db = duckdb_type(a), duckdb_type(b)
    for rule in (_integers, _numerics, _strings, _same_family):
        verdict = rule(a, b, da, db)
        if verdict is not None:
            return verdict
    return False


def _integers(a: str, b: str, da: str, db: str) -> bool | None:
    if da not in _INTEGER_RANK or a == "oid":
        return None
    if db in _INTEGER_RANK:
        return _INTEGER_RANK[db] >= _INTEGER_RANK[da]
    bounds = _numeric_bounds(b)
    if bounds is None:
        return None
    precision, scale = bounds
    return precision is None or precision - scale >= _INTEGER_DIGITS[da]


def _numerics(a: str, b: str, da: str, db: str) -> bool | None:
    old, new = _numeric_bounds(a), _numeric_bounds(b)
    if old is None or new is None:
        return None
    (p, s), (p2, s2) = old, new
    if p2 is None:
        return True
    if p is None:
        return False
    return s2 >= s and p2 - s2 >= p - s


def _numeric_bounds(name: str) -> tuple[int | None, int] | None:
    match = _NUMERIC.fullmatch(name)
    if match is None:
        return None
    precision, scale = match.groups()
    return (None, 0) if precision is None else (int(precision), int(scale or 0))


def _strings(a: str, b: str, da: str, db: str) -> bool | None:
    old, new = _STRING.fullmatch(a), _STRING.fullmatch(b)
    if old is None or new is None:
        return None
    unbounded = new.group(1) == "text" or (new.group(2) is None and new.group(1) != "character")
    if unbounded:
        return True
    return old.group(2) is not None and int(new.group(2) or 1) >= int(old.group(2))


def _same_family(a: str, b: str, da: str, db: str) -> bool | None:
    if {a, b} <= {"json", "jsonb"} or (da, db) == ("REAL", "DOUBLE"):
        return True
    if da != db or da not in ("TIME", "TIMETZ", "TIMESTAMP", "TIMESTAMPTZ", "INTERVAL"):
        return None
    return _precision(b) >= _precision(a)


def _precision(name: str) -> int:
    match = re.search(r"\((\d+)\)", name)
    return int(match.group(1)) if match else 6
