"""Snapshot ranges over ``_id``, as pure functions.

A collection is read in ranges ``lo < _id <= hi`` so that workers read it in parallel and a
crash loses at most the batch in flight: each range stores the last ``_id`` committed.

``_id`` may hold values of different BSON types in one collection, and a query's ``$gt`` only
matches values of the same type ("type bracketing"), while ``sort`` orders across types. So
"after ``v``" is ``$gt v`` within ``v``'s bracket *or* any value of a later bracket, in the
server's comparison order. Boundaries are stored as canonical Extended JSON so their exact
BSON type survives the trip through the log.
"""

from __future__ import annotations

from typing import Any

import orjson
from bson import json_util
from bson.binary import Binary
from bson.datetime_ms import DatetimeMS
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

# MongoDB's comparison order of BSON types (arrays cannot be an _id).
BRACKETS: tuple[tuple[str, ...], ...] = (
    ("minKey",),
    ("null",),
    ("double", "int", "long", "decimal"),
    ("string",),  # "symbol" is deprecated and unknown to some servers
    ("object",),
    ("binData",),
    ("objectId",),
    ("bool",),
    ("date",),
    ("timestamp",),
    ("regex",),
    ("maxKey",),
)


def bracket(value: Any) -> int:
    """The index in :data:`BRACKETS` of ``value``'s type."""
    checks: tuple[tuple[type | tuple[type, ...], int], ...] = (
        (MinKey, 0),
        (type(None), 1),
        (bool, 7),
        ((int, float, Int64, Decimal128), 2),
        (str, 3),
        (dict, 4),
        ((bytes, Binary), 5),
        (ObjectId, 6),
        (Timestamp, 9),
        ((DatetimeMS,), 8),
        (Regex, 10),
        (MaxKey, 11),
    )
    for kind, index in checks:
        if isinstance(value, kind):
            return index
    if hasattr(value, "utcoffset"):  # datetime
        return 8
    return 4  # SON and other mappings


def _types(brackets: range) -> list[str]:
    return [name for i in brackets for name in BRACKETS[i]]


def after(value: Any) -> dict[str, Any]:
    """Filter: ``_id`` sorts after ``value``."""
    later = _types(range(bracket(value) + 1, len(BRACKETS)))
    if not later:
        return {"_id": {"$gt": value}}
    return {"$or": [{"_id": {"$gt": value}}, {"_id": {"$type": later}}]}


def up_to(value: Any) -> dict[str, Any]:
    """Filter: ``_id`` sorts at or before ``value``."""
    earlier = _types(range(bracket(value)))
    if not earlier:
        return {"_id": {"$lte": value}}
    return {"$or": [{"_id": {"$lte": value}}, {"_id": {"$type": earlier}}]}


def range_filter(
    lo: tuple[bool, Any], hi: tuple[bool, Any], one_type: bool = False
) -> dict[str, Any]:
    """Filter of ``lo < _id <= hi``; each side is ``(present, value)`` (absent: open).

    ``one_type``: every ``_id`` the range must find has the type of ``lo`` and ``hi``, so plain
    ``$gt``/``$lte`` do (the servers' fast path: an index range, no ``$or``).
    """
    if one_type:
        bounds = {"$gt": lo, "$lte": hi}
        wanted = {op: side[1] for op, side in bounds.items() if side[0]}
        return {"_id": wanted} if wanted else {}
    parts = [after(lo[1])] if lo[0] else []
    parts += [up_to(hi[1])] if hi[0] else []
    if not parts:
        return {}
    return parts[0] if len(parts) == 1 else {"$and": parts}


def boundaries(sorted_ids: list[Any], every: int) -> list[Any]:
    """Every ``every``-th id of an ascending walk: upper boundaries of all but the last range."""
    return [sorted_ids[i] for i in range(every - 1, len(sorted_ids) - 1, every)]


def plan(bounds: list[Any], one_type: bool = False) -> list[dict[str, Any]]:
    """Ranges ``(None, b0], (b0, b1], ..., (bn, None)`` as stored JSON.

    The last range is open, so documents inserted beyond the planned boundaries still belong
    to a range (changes during the scan are streamed anyway; reading them is harmless).

    Args:
        bounds: sorted upper boundaries.
        one_type: the smallest and the largest ``_id`` were of one type bracket when planned,
            so every document present then is of that bracket: documents of another type
            can only have been inserted after the streams' start point, and are streamed.
    """
    edges: list[Any] = [None, *bounds, None]
    return [
        {
            "lo": None if i == 0 else encode(edges[i]),
            "hi": None if i == len(edges) - 2 else encode(edges[i + 1]),
            "last": None,
            "done": False,
            "one_type": one_type,
        }
        for i in range(len(edges) - 1)
    ]


def encode(value: Any) -> dict[str, Any]:
    """An ``_id`` as stored: ``{"v": <canonical Extended JSON>}``.

    Wrapped, because ``None`` stands for an open side while ``null`` is a valid ``_id``.
    """
    text = json_util.dumps({"v": value}, json_options=json_util.CANONICAL_JSON_OPTIONS)
    stored: dict[str, Any] = orjson.loads(text)
    return stored


def decode(stored: dict[str, Any]) -> Any:
    """The inverse of :func:`encode`."""
    return json_util.loads(orjson.dumps(stored))["v"]


def _bound(stored: dict[str, Any] | None) -> tuple[bool, Any]:
    return (False, None) if stored is None else (True, decode(stored))


def resume_filter(entry: dict[str, Any]) -> dict[str, Any]:
    """Filter of what a stored range still has to read."""
    start = entry["last"] if entry["last"] is not None else entry["lo"]
    return range_filter(_bound(start), _bound(entry["hi"]), bool(entry.get("one_type")))
