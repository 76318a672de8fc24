"""A MongoDB query document evaluated in Python, as ``find`` would on the server.

The MongoDB source decides every row filter (``where``) itself, on the documents it is about to
emit, because the server cannot always do it for it (a change stream has no pre-image without
MongoDB 6.0's ``changeStreamPreAndPostImages``, and the test server applies stages before it
repairs its events). This evaluator supports the operators below, with MongoDB's semantics:

* equality on a field or a dotted path (``a.b.c``, ``items.0``), reaching into arrays of
  documents and matching an array that holds the value (``{tags: "x"}``) or equals it;
  ``null`` matches a missing field too;
* ``$eq $ne $gt $gte $lt $lte $in $nin $exists $not`` and ``$and $or $nor``;
* comparisons only within a type bracket (``{n: {$gt: 5}}`` never matches a string): int,
  long, double and Decimal128 compare as numbers; strings by code point (the server's binary
  comparison without a collation); booleans; dates (to the millisecond); ObjectIds; documents
  and arrays in BSON order; ``null`` and a missing field as one.

Anything else (``$regex``, ``$expr``, ``$elemMatch``, ``$size``, ``$type``...) is refused when
the query is compiled (:class:`QueryError`), so ``cdc validate`` reports it. Values in the query
may be written as Extended JSON (``{$oid: "..."}``, ``{$date: "2024-01-01T00:00:00Z"}``,
``{$numberDecimal: "1.5"}``...); :func:`from_extended_json` turns them into BSON values.

Why not a library: the maintained Python evaluators on PyPI do not compare as MongoDB does:
``mongoquery`` compares with Python's operators (``True == 1``; a ``Decimal128`` compares with
nothing), ``mgqpy`` turns strings into dates and decimals for comparisons and knows no BSON
type, and ``mongomock``'s filtering is part of a whole fake ``pymongo`` for tests.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

from bson import json_util
from bson.datetime_ms import DatetimeMS
from bson.decimal128 import Decimal128
from bson.json_util import JSONOptions
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

Doc = Mapping[str, Any]
#: A compiled query: the document in, whether it matches out.
Predicate = Callable[[Doc], bool]
_Test = Callable[[list[Any]], bool]


class _Missing:
    """A path that leads nowhere (compares as ``null``, but is not one)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
LOGICAL: Final = ("$and", "$or", "$nor")
FIELD_OPERATORS: Final = (
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exists",
    "$not",
)
_EXTENDED_JSON: Final = frozenset(
    (
        "$oid",
        "$date",
        "$numberDecimal",
        "$numberLong",
        "$numberInt",
        "$numberDouble",
        "$binary",
        "$uuid",
        "$timestamp",
        "$minKey",
        "$maxKey",
    )
)
_JSON_OPTIONS: Final = JSONOptions(tz_aware=True, tzinfo=dt.UTC)
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class QueryError(ValueError):
    """A query the evaluator cannot run; ``at`` is where in the query (``name.$regex``)."""

    def __init__(self, at: str, message: str) -> None:
        self.at = at
        self.message = message
        super().__init__(f"{message} (at {at})" if at else message)


# -- Extended JSON in, BSON values out ----------------------------------------------------------


def from_extended_json(value: Any, at: str = "") -> Any:
    """A query as written in YAML with its Extended JSON values made BSON values; a YAML date
    (``2024-01-01``) is midnight UTC, a YAML timestamp without a zone is UTC.

    Raises:
        QueryError: an Extended JSON value that does not parse.
    """
    if isinstance(value, Mapping):
        if value and set(value) <= _EXTENDED_JSON:
            try:
                return json_util.loads(json.dumps(dict(value)), json_options=_JSON_OPTIONS)
            except (TypeError, ValueError) as exc:
                raise QueryError(at, f"not valid Extended JSON: {exc}") from None
        return {str(k): from_extended_json(v, _at(at, str(k))) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [from_extended_json(v, _at(at, str(i))) for i, v in enumerate(value)]
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    return value


def _at(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


# -- compiling ----------------------------------------------------------------------------------


def compile_query(query: Any, at: str = "") -> Predicate:
    """The predicate of a query document (values already BSON: :func:`from_extended_json`).

    Raises:
        QueryError: not a mapping, an unsupported operator or value, a malformed operand.
    """
    if not isinstance(query, Mapping):
        raise QueryError(at, "must be a query document (a mapping)")
    parts = [
        _logical(key, value, _at(at, key))
        if key.startswith("$")
        else _field(key, value, _at(at, key))
        for key, value in query.items()
    ]
    if len(parts) == 1:
        return parts[0]
    return lambda doc: all(part(doc) for part in parts)


def _logical(op: str, operand: Any, at: str) -> Predicate:
    if op not in LOGICAL:
        raise QueryError(at, f"unsupported operator {op} (supported: {_supported()})")
    if not isinstance(operand, list) or not operand:
        raise QueryError(at, f"{op} takes a non-empty list of query documents")
    parts = [compile_query(q, _at(at, str(i))) for i, q in enumerate(operand)]
    if op == "$and":
        return lambda doc: all(p(doc) for p in parts)
    if op == "$or":
        return lambda doc: any(p(doc) for p in parts)
    return lambda doc: not any(p(doc) for p in parts)


def _field(path: str, condition: Any, at: str) -> Predicate:
    steps = path.split(".")
    if not all(steps):
        raise QueryError(at, f"{path!r} is not a field path")
    test = _operators(condition, at) if _is_operators(condition, at) else _equals(condition, at)
    return lambda doc: test(resolve(doc, steps))


def _is_operators(condition: Any, at: str) -> bool:
    if not isinstance(condition, Mapping) or not condition:
        return False
    dollars = [str(k).startswith("$") for k in condition]
    if any(dollars) and not all(dollars):
        raise QueryError(at, "mixes operators and field names: use a dotted path for a field")
    return all(dollars)


def _operators(condition: Mapping[str, Any], at: str) -> _Test:
    tests = [_operator(str(op), operand, _at(at, str(op))) for op, operand in condition.items()]
    if len(tests) == 1:
        return tests[0]
    return lambda values: all(t(values) for t in tests)


def _operator(op: str, operand: Any, at: str) -> _Test:
    if op in ("$eq", "$ne"):
        test = _equals(operand, at)
        return test if op == "$eq" else _negated(test)
    if op in _RANGES:
        _check_value(operand, at)
        return _range(op, operand)
    if op in ("$in", "$nin"):
        test = _member(operand, at)
        return test if op == "$in" else _negated(test)
    if op == "$exists":
        if not isinstance(operand, bool | int | float):
            raise QueryError(at, "$exists takes true or false")
        wanted = bool(operand)
        return lambda values: any(v is not MISSING for v in values) == wanted
    if op == "$not":
        if not _is_operators(operand, at):
            raise QueryError(at, "$not takes an operator document, e.g. {$not: {$gt: 5}}")
        return _negated(_operators(operand, at))
    raise QueryError(at, f"unsupported operator {op} (supported: {_supported()})")


def _supported() -> str:
    return " ".join((*FIELD_OPERATORS, *LOGICAL))


def _negated(test: _Test) -> _Test:
    return lambda values: not test(values)


def _equals(operand: Any, at: str) -> _Test:
    _check_value(operand, at)
    return lambda values: any(_equal_or_holds(v, operand) for v in values)


def _member(operand: Any, at: str) -> _Test:
    if not isinstance(operand, list):
        raise QueryError(at, "takes a list of values")
    for index, item in enumerate(operand):
        _check_value(item, _at(at, str(index)))
        if _is_operators(item, at):
            raise QueryError(_at(at, str(index)), "a list of values may not hold operators")
    return lambda values: any(_equal_or_holds(v, o) for v in values for o in operand)


def _check_value(value: Any, at: str) -> None:
    """Refuse what a value may not be: a regular expression, or a document holding operators."""
    if isinstance(value, Regex | re.Pattern):
        raise QueryError(at, "regular expressions are not supported")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if str(key).startswith("$"):
                raise QueryError(
                    _at(at, str(key)),
                    f"unsupported operator {key} inside a value (compare a field with a "
                    "dotted path instead: {a.b: {$gt: 1}})",
                )
            _check_value(item, _at(at, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_value(item, _at(at, str(index)))


# -- paths --------------------------------------------------------------------------------------


def resolve(value: Any, steps: Sequence[str], index: int = 0) -> list[Any]:
    """The values a path leads to, as the server's path traversal finds them: into documents,
    and into each document of an array (a numeric step also takes the array's element). A
    document of such an array without the field contributes :data:`MISSING`; its other
    elements contribute nothing, so ``{"a.b": null}`` matches ``{a: [{}]}`` but neither
    ``{a: []}`` nor ``{a: [5]}`` (the server's own tests, ``jstests/core/null2.js``)."""
    if index == len(steps):
        return [value]
    step = steps[index]
    if isinstance(value, Mapping):
        return resolve(value[step], steps, index + 1) if step in value else [MISSING]
    if not isinstance(value, list):
        return [MISSING]
    found: list[Any] = []
    numeric = step.isascii() and step.isdigit()
    if numeric and int(step) < len(value):
        found += resolve(value[int(step)], steps, index + 1)
    for item in value:
        if isinstance(item, Mapping):
            inner = resolve(item, steps, index)
            found += [v for v in inner if v is not MISSING] if numeric else inner
    return found


# -- comparing ----------------------------------------------------------------------------------

# MongoDB's order of types; values compare (and range operators match) only within one bracket.
_NULL, _NUMBER, _STRING, _OBJECT, _ARRAY, _BINARY, _OID, _BOOL, _DATE, _TIMESTAMP = range(1, 11)
_REGEX, _MAXKEY, _MINKEY = 11, 12, 0


def bracket(value: Any) -> int:
    """The type bracket of a value (``MISSING`` and ``None`` share ``null``'s)."""
    if value is None or value is MISSING:
        return _NULL
    if isinstance(value, bool):
        return _BOOL
    if isinstance(value, int | float | Decimal128 | Decimal):
        return _NUMBER
    if isinstance(value, str):
        return _STRING
    if isinstance(value, Mapping):
        return _OBJECT
    if isinstance(value, list | tuple):
        return _ARRAY
    for kind, index in _OTHER_BRACKETS:
        if isinstance(value, kind):
            return index
    return _OBJECT  # DBRef, Code and the like: documents as far as a filter is concerned


_OTHER_BRACKETS: Final[tuple[tuple[type, int], ...]] = (
    (dt.datetime, _DATE),
    (DatetimeMS, _DATE),
    (bytes, _BINARY),  # Binary too
    (ObjectId, _OID),
    (Timestamp, _TIMESTAMP),
    (Regex, _REGEX),
    (MinKey, _MINKEY),
    (MaxKey, _MAXKEY),
)


def _number(value: Any) -> Any:
    """A number Python compares exactly with any other (a Decimal128 as a Decimal)."""
    return value.to_decimal() if isinstance(value, Decimal128) else value


def _nan(value: Any) -> bool:
    if isinstance(value, Decimal):
        return value.is_nan()
    return isinstance(value, float) and math.isnan(value)


def _millis(value: Any) -> int:
    if isinstance(value, DatetimeMS):
        return int(value)
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    delta: dt.timedelta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _key(value: Any, kind: int) -> Any:
    """What values of one bracket compare by (numbers, documents and arrays aside)."""
    if kind == _DATE:
        return _millis(value)
    if kind == _BINARY:
        return (len(value), getattr(value, "subtype", 0), bytes(value))
    if kind == _OID:
        return value.binary
    if kind == _TIMESTAMP:
        return (value.time, value.inc)
    if kind == _REGEX:
        return (value.pattern, str(value.flags))
    if kind in (_NULL, _MINKEY, _MAXKEY):
        return 0
    return value


def compare(a: Any, b: Any) -> int:
    """BSON order of two values: -1, 0 or 1 (NaN sorts before every other number)."""
    ka, kb = bracket(a), bracket(b)
    if ka != kb:
        return -1 if ka < kb else 1
    if ka == _NUMBER:
        x, y = _number(a), _number(b)
        if _nan(x) or _nan(y):
            return int(not _nan(x)) - int(not _nan(y))
        return _order(x, y)
    if ka == _OBJECT:
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
            return _order(str(a), str(b))  # a DBRef or Code: equal when their text is
        return _compare_documents(a, b)
    if ka == _ARRAY:
        return _compare_arrays(a, b)
    return _order(_key(a, ka), _key(b, ka))


def _order(x: Any, y: Any) -> int:
    return int(x > y) - int(x < y)


def _compare_documents(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    for (ak, av), (bk, bv) in zip(a.items(), b.items(), strict=False):
        ta, tb = bracket(av), bracket(bv)
        if ta != tb:
            return -1 if ta < tb else 1
        if ak != bk:
            return -1 if ak < bk else 1
        order = compare(av, bv)
        if order:
            return order
    return (len(a) > len(b)) - (len(a) < len(b))


def _compare_arrays(a: Sequence[Any], b: Sequence[Any]) -> int:
    for x, y in zip(a, b, strict=False):
        order = compare(x, y)
        if order:
            return order
    return (len(a) > len(b)) - (len(a) < len(b))


def equal(a: Any, b: Any) -> bool:
    """Query equality: numbers by value across their types (NaN equals NaN), documents with
    the same fields in the same order, ``null`` equals a missing value."""
    return bracket(a) == bracket(b) and compare(a, b) == 0


def _equal_or_holds(value: Any, operand: Any) -> bool:
    """``value`` equals ``operand``, or is an array with an element equal to it."""
    if value is MISSING:
        return operand is None
    if equal(value, operand):
        return True
    return isinstance(value, list) and any(equal(item, operand) for item in value)


_RANGES: Final[dict[str, Callable[[int], bool]]] = {
    "$gt": lambda order: order > 0,
    "$gte": lambda order: order >= 0,
    "$lt": lambda order: order < 0,
    "$lte": lambda order: order <= 0,
}


def _range(op: str, operand: Any) -> _Test:
    holds = _RANGES[op]
    inclusive = op in ("$gte", "$lte")
    kind = bracket(operand)

    def one(value: Any) -> bool:
        if bracket(value) != kind:
            return False
        if kind == _NUMBER and (_nan(_number(value)) or _nan(_number(operand))):
            # The server's range operators match NaN only to NaN, and only inclusively.
            return inclusive and _nan(_number(value)) and _nan(_number(operand))
        return holds(compare(value, operand))

    def test(values: list[Any]) -> bool:
        for value in values:
            if value is MISSING:
                if inclusive and operand is None:
                    return True
                continue
            if one(value) or (isinstance(value, list) and any(one(v) for v in value)):
                return True
        return False

    return test


# -- the server's side ---------------------------------------------------------------------------


def fields(query: Mapping[str, Any]) -> set[str]:
    """The top-level fields a query reads (``a`` of ``a.b``), through ``$and/$or/$nor``."""
    out: set[str] = set()
    for key, value in query.items():
        if key in LOGICAL:
            for sub in value:
                out |= fields(sub)
        else:
            out.add(key.partition(".")[0])
    return out


def prefixed(query: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """``query`` over the document at ``prefix`` of another document (a change event's
    ``fullDocument``): every field path gains the prefix, logical operators are kept."""
    out: dict[str, Any] = {}
    for key, value in query.items():
        if key in LOGICAL:
            out[key] = [prefixed(q, prefix) for q in value]
        else:
            out[f"{prefix}.{key}"] = value
    return out
