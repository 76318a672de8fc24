"""Positions and stored offsets, as pure functions over plain data.

A change's position is its ``clusterTime`` as one integer, ``seconds << 32 | increment``: the
oplog's own order, so positions from every stream and from snapshots compare. What the log
stores under ``"mongodb"`` (rewritten whole with every commit, in the same log transaction as the
records it covers)::

    {"mongodb": {
        "streams": {"<stream id>": {"resume_token": {...}, "start_after": false,
                                    "cluster_time": 7310..., "at": "2026-11-29T23:51:17Z"}},
        "snapshot": {...},            # an unfinished snapshot (see :mod:`.snapshot`)
        "last_snapshot": {...},       # the figures of the last finished one
        "history_lost": [{...}]}}     # the last few times the oplog no longer held a position

Stream ids are ``db.collection``, ``db`` or ``*`` (see :mod:`.plan`). A stream without a token
but with ``cluster_time`` resumes from that time (``startAtOperationTime``); ``start_after`` is
set after an invalidate, whose token only ``startAfter`` accepts.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import Any

import orjson
from bson import json_util
from bson.timestamp import Timestamp

OFFSET_KEY = "mongodb"
HISTORY_KEPT = 5


def position(cluster_time: Timestamp) -> int:
    """``clusterTime`` as one ordered integer."""
    return (cluster_time.time << 32) | cluster_time.inc


def timestamp(position_value: int) -> Timestamp:
    """The inverse of :func:`position`."""
    return Timestamp(position_value >> 32, position_value & 0xFFFFFFFF)


def iso(position_value: int) -> str:
    """A position's wall-clock second, for people reading ``cdc status``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(position_value >> 32))


def token_position(token: Mapping[str, Any] | None) -> int | None:
    """The cluster time inside a resume token, when its format is known.

    Real servers write a KeyString whose first byte is ``0x82`` (a BSON Timestamp) followed by
    the timestamp's 8 bytes; mongo-java-server writes the 8 bytes alone as 16 hex digits.
    """
    data = token.get("_data") if token else None
    if not isinstance(data, str):
        return None
    try:
        if len(data) == 16:
            return int(data, 16)
        if len(data) >= 18 and data[:2] == "82":
            return int(data[2:18], 16)
    except ValueError:
        return None
    return None


def token_to_json(token: Mapping[str, Any]) -> Any:
    """A resume token as canonical Extended JSON (exact for any BSON it may hold)."""
    return orjson.loads(json_util.dumps(token, json_options=json_util.CANONICAL_JSON_OPTIONS))


def token_from_json(stored: Any) -> dict[str, Any]:
    """The inverse of :func:`token_to_json`."""
    loaded: dict[str, Any] = json_util.loads(orjson.dumps(stored))
    return loaded


def stream_entry(
    token: Mapping[str, Any] | None, cluster_time: int | None, start_after: bool = False
) -> dict[str, Any]:
    """One stream's stored resume point."""
    when = cluster_time if cluster_time is not None else token_position(token)
    entry: dict[str, Any] = {
        "resume_token": None if token is None else token_to_json(token),
        "start_after": start_after,
        "cluster_time": when,
    }
    if when is not None:
        entry["at"] = iso(when)
    return entry


def stored(offsets: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of this source's stored entry (empty when nothing is stored)."""
    entry = offsets.get(OFFSET_KEY)
    return copy.deepcopy(dict(entry)) if isinstance(entry, Mapping) else {}


def add_history_lost(entry: dict[str, Any], note: Mapping[str, Any]) -> None:
    """Keep the last few history-lost notes, for ``cdc status``."""
    notes = [*entry.get("history_lost", []), dict(note)]
    entry["history_lost"] = notes[-HISTORY_KEPT:]
