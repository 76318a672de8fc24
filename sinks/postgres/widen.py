"""Which type changes of a target column keep every value: those the sink applies with
``ALTER COLUMN ... TYPE`` (:mod:`sinks.postgres.evolve`). Pure functions over type names."""

from __future__ import annotations

import re
from typing import Final

from sinks.postgres.types import NUMERIC, STRING, target_type

_INTEGER_RANK: Final = {"smallint": 1, "integer": 2, "bigint": 3}
_INTEGER_DIGITS: Final = {"smallint": 5, "integer": 10, "bigint": 19}


def is_widening(old: str, new: str) -> bool:
    """Whether changing a target column from type ``old`` to ``new`` keeps every value.

    Widening: ``smallint`` -> ``integer`` -> ``bigint``, an integer to a numeric with room for
    its digits, ``real`` -> ``double precision``, ``numeric(p,s)`` -> ``numeric(p2,s2)`` with
    ``s2 >= s`` and ``p2 - s2 >= p - s`` (or unconstrained), a longer or unbounded
    ``character varying`` or ``text``, ``json`` <-> ``jsonb``, a higher time precision, and
    the same element-wise for arrays.
    """
    a, b = target_type(old), target_type(new)
    if a == b:
        return True
    if a.endswith("[]") != b.endswith("[]"):
        return False
    a, b = a.removesuffix("[]"), b.removesuffix("[]")
    for rule in (_integers, _numerics, _strings, _same_family):
        verdict = rule(a, b)
        if verdict is not None:
            return verdict
    return False


def _integers(a: str, b: str) -> bool | None:
    if a not in _INTEGER_RANK:
        return None
    if b in _INTEGER_RANK:
        return _INTEGER_RANK[b] >= _INTEGER_RANK[a]
    bounds = _numeric_bounds(b)
    if bounds is None:
        return None
    precision, scale = bounds
    return precision is None or precision - scale >= _INTEGER_DIGITS[a]


def _numerics(a: str, b: str) -> bool | None:
    old, new = _numeric_bounds(a), _numeric_bounds(b)
    if old is None or new is None:
        return None
    (p, s), (p2, s2) = old, new
    if p2 is None:
        return True
    return p is not None and s2 >= s and p2 - s2 >= p - s


def _numeric_bounds(name: str) -> tuple[int | None, int] | None:
    match = NUMERIC.fullmatch(name)
    if match is None:
        return None
    precision, scale = match.groups()
    return (None, 0) if precision is None else (int(precision), int(scale or 0))


def _strings(a: str, b: str) -> bool | None:
    old, new = STRING.fullmatch(a), STRING.fullmatch(b)
    if old is None or a.startswith("character("):
        return None  # blank-padded: another type's values would lose or gain the padding
    if b == "text" or b == "character varying":
        return True
    if new is None or b.startswith("character("):
        return None
    return old.group(2) is not None and int(new.group(2)) >= int(old.group(2))


def _same_family(a: str, b: str) -> bool | None:
    if {a, b} <= {"json", "jsonb"} or (a, b) == ("real", "double precision"):
        return True
    plain_a, plain_b = re.sub(r"\(\d+\)", "", a), re.sub(r"\(\d+\)", "", b)
    if plain_a != plain_b or not plain_a.startswith(("time", "interval")):
        return None
    return _precision(b) >= _precision(a)


def _precision(name: str) -> int:
    match = re.search(r"\((\d+)\)", name)
    return int(match.group(1)) if match else 6
