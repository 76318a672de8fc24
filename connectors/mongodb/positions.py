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
        "history_lost": [{...}],      # the last few times the oplog no longer held a position
        "restarts": {"<stream id>": 1}}}  # streams started afresh after that (only once one was)

Stream ids are ``db.collection``, ``db`` or ``*`` (see :mod:`.plan`). A stream without a token
but with ``cluster_time`` resumes from that time (``startAtOperationTime``); ``start_after`` is
set after an invalidate, whose token only ``startAfter`` accepts.

Typed: one stream's entry is a :class:`StreamPoint`, ordered by cluster time; the streams of the
block together are a :class:`MongoPosition` (a :class:`cdc.contracts.positions.Position`), which is
behind another when any stream both hold is behind there. Each has one codec to and from the block.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from bson import json_util
from bson.timestamp import Timestamp

from cdc.contracts.positions import Offsets, PositionedOffsets

OFFSET_KEY = "mongodb"
RESTARTS_KEY = "restarts"
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


@dataclass(frozen=True, slots=True)
class StreamPoint:
    """One stream's resume point, ordered by cluster time (a point without one is unordered).

    Attributes:
        token: the resume token as stored (canonical Extended JSON), or ``None``.
        start_after: resume with ``startAfter`` (after an invalidate), not ``resumeAfter``.
        cluster_time: the point's cluster time as one integer (see :func:`position`).
    """

    token: Any
    start_after: bool = False
    cluster_time: int | None = None

    @classmethod
    def of(
        cls, token: Mapping[str, Any] | None, cluster_time: int | None, start_after: bool = False
    ) -> StreamPoint:
        """The point of a live token (its cluster time read from it when not given)."""
        when = cluster_time if cluster_time is not None else token_position(token)
        return cls(None if token is None else token_to_json(token), start_after, when)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> StreamPoint:
        """Decode a stored stream entry."""
        when = entry.get("cluster_time")
        return cls(
            entry.get("resume_token"),
            bool(entry.get("start_after")),
            when if isinstance(when, int) and not isinstance(when, bool) else None,
        )

    def to_entry(self) -> dict[str, Any]:
        """The stored stream entry (``at`` is for people reading ``cdc status``)."""
        entry: dict[str, Any] = {
            "resume_token": self.token,
            "start_after": self.start_after,
            "cluster_time": self.cluster_time,
        }
        if self.cluster_time is not None:
            entry["at"] = iso(self.cluster_time)
        return entry

    def __lt__(self, other: StreamPoint) -> bool:
        if self.cluster_time is None or other.cluster_time is None:
            return False
        return self.cluster_time < other.cluster_time


@dataclass(frozen=True, slots=True)
class MongoPosition:
    """The resume points of every stream of the source, as stored under ``"mongodb"``.

    ``restarts`` counts, per stream, the times it was started afresh because the server no
    longer held its point (history lost): a restarted stream's new point need not come after
    the lost one (mongo-java-server starts it earlier in the same second), and it is not behind
    it either, so points compare as ``(restarts, cluster time)``. Stored as the block's
    ``"restarts"`` only once a stream was restarted.
    """

    streams: Mapping[str, StreamPoint] = field(default_factory=dict)
    restarts: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_offsets(cls, offsets: Offsets) -> MongoPosition | None:
        """The streams' points stored in ``offsets``, or ``None`` when none is stored."""
        entry = offsets.get(OFFSET_KEY)
        streams = entry.get("streams") if isinstance(entry, Mapping) else None
        if not isinstance(streams, Mapping) or not streams:
            return None
        assert isinstance(entry, Mapping)
        return cls.from_entries(streams, entry.get(RESTARTS_KEY))

    @classmethod
    def from_entries(cls, streams: Mapping[str, Any], restarts: Any = None) -> MongoPosition:
        """Decode the ``streams`` (and ``restarts``) of a stored block."""
        counts = restarts if isinstance(restarts, Mapping) else {}
        return cls(
            {sid: StreamPoint.from_entry(e) for sid, e in streams.items()},
            {sid: n for sid, n in counts.items() if isinstance(n, int)},
        )

    def to_offsets(self, entry: Mapping[str, Any]) -> PositionedOffsets:
        """The offsets storing ``entry`` (the whole block) with these points as its streams."""
        streams = {sid: point.to_entry() for sid, point in self.streams.items()}
        block = {**entry, "streams": streams}
        if self.restarts:
            block[RESTARTS_KEY] = dict(self.restarts)
        return PositionedOffsets({OFFSET_KEY: block}, self)

    def __lt__(self, other: object) -> bool:
        """Behind ``other`` in some stream both hold (streams come and go with the plan).

        Another kind of target (a fence's cluster time, :mod:`.fence`) decides by its ``__gt__``.
        """
        if not isinstance(other, MongoPosition):
            return NotImplemented
        theirs = other.streams
        return any(
            sid in theirs and self._behind(sid, p, other, theirs[sid])
            for sid, p in self.streams.items()
        )

    def _behind(
        self, sid: str, mine: StreamPoint, other: MongoPosition, their: StreamPoint
    ) -> bool:
        restarted, their_restarts = self.restarts.get(sid, 0), other.restarts.get(sid, 0)
        if restarted != their_restarts:
            return restarted < their_restarts
        return mine < their

    def __str__(self) -> str:
        times = {sid: p.cluster_time for sid, p in sorted(self.streams.items())}
        text = "streams at cluster times " + ", ".join(f"{s}={t}" for s, t in times.items())
        if self.restarts:
            text += (
                " (restarted: "
                + ", ".join(f"{s}={n}" for s, n in sorted(self.restarts.items()))
                + ")"
            )
        return text


def count_restart(entry: dict[str, Any], stream_id: str) -> None:
    """Note in the stored block that ``stream_id`` starts afresh (see :class:`MongoPosition`)."""
    restarts = entry.setdefault(RESTARTS_KEY, {})
    restarts[stream_id] = restarts.get(stream_id, 0) + 1


def stream_entry(
    token: Mapping[str, Any] | None, cluster_time: int | None, start_after: bool = False
) -> dict[str, Any]:
    """One stream's stored resume point (see :class:`StreamPoint`)."""
    return StreamPoint.of(token, cluster_time, start_after).to_entry()


def stored(offsets: Offsets) -> dict[str, Any]:
    """A deep copy of this source's stored entry (empty when nothing is stored)."""
    entry = offsets.get(OFFSET_KEY)
    return copy.deepcopy(dict(entry)) if isinstance(entry, Mapping) else {}


def add_history_lost(entry: dict[str, Any], note: Mapping[str, Any]) -> None:
    """Keep the last few history-lost notes, for ``cdc status``."""
    notes = [*entry.get("history_lost", []), dict(note)]
    entry["history_lost"] = notes[-HISTORY_KEPT:]
