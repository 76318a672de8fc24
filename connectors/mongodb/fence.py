"""MongoDB's positions for read-your-writes fences (``cdc wait``, :mod:`cdc.fence`).

A fence waits until a sink holds every change committed up to a target, of one of two kinds:

* a stored position (:class:`~.positions.MongoPosition`), as ``cdc status`` prints it
  (``streams at cluster times shop.orders=7310..., shop.customers=7310...``): each stream must
  reach its own point (in the streams both hold, as the partial order of positions says);
* a cluster time (:class:`ClusterTime`): the server's ``$clusterTime`` at the call (``--now``),
  or one the writer read after its write (``Timestamp(1796622473, 2)``, how pymongo prints a
  session's ``operation_time``): every stream must reach it. A stream whose collections change
  reaches it with a change; a quiet one with the post-batch resume token the server returns
  for an empty read, which the source stores (:mod:`.streaming`, ``idle_commit_interval_s``).

mongo-java-server (the tests' server) reports no cluster time in any reply: there ``--now``
is refused (:class:`cdc.fence.FenceError`, exit 2) rather than answered with a wrong time, and
``--position`` works.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson.timestamp import Timestamp
from pymongo import MongoClient
from pymongo import errors as px

from cdc.config.pipeline import redact_url
from cdc.contracts.errors import SourceUnavailable
from cdc.contracts.positions import Offsets
from cdc.fence import FenceError
from connectors.mongodb.client import client_for
from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.positions import MongoPosition, StreamPoint, position, timestamp

_TIMESTAMP = re.compile(r"Timestamp\((\d+), *(\d+)\)")
_STATUS = re.compile(
    r"streams at cluster times (?P<streams>.+?)(?: \(restarted: (?P<restarts>.+)\))?"
)
_MAX = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class ClusterTime:
    """A cluster time every stream must reach (see the module docstring).

    Attributes:
        value: the cluster time as one integer (:func:`.positions.position`).
    """

    value: int

    @classmethod
    def of(cls, cluster_time: Timestamp) -> ClusterTime:
        """The target of a BSON timestamp (a reply's ``operationTime``)."""
        return cls(position(cluster_time))

    def __gt__(self, other: object) -> bool:
        """A stored position is behind this time (not reached yet) when one of its streams is
        behind it or holds no cluster time (unknown counts as behind: never a wrong answer)."""
        if not isinstance(other, MongoPosition):
            return NotImplemented
        points = other.streams.values()
        return not points or any(
            p.cluster_time is None or p.cluster_time < self.value for p in points
        )

    def __str__(self) -> str:
        return str(timestamp(self.value))  # Timestamp(T, I): what parse_position reads back


def stored_position(offsets: Offsets) -> MongoPosition | None:
    """The streams' points the stored offsets hold (``None``: none stored yet)."""
    return MongoPosition.from_offsets(offsets)


def parse_position(text: str) -> MongoPosition | ClusterTime:
    """A position as ``cdc status`` prints it (a :class:`MongoPosition`), or a cluster time:
    ``Timestamp(T, I)`` or the stored offsets' ``cluster_time`` integer (a :class:`ClusterTime`).

    Raises:
        ValueError: none of these.
    """
    text = text.strip()
    if found := _TIMESTAMP.fullmatch(text):
        return ClusterTime.of(Timestamp(int(found[1]), int(found[2])))
    if text.isdigit() and int(text) <= _MAX:
        return ClusterTime(int(text))
    if found := _STATUS.fullmatch(text):
        streams = {sid: _cluster_time(t) for sid, t in _pairs(found["streams"])}
        restarts = {sid: int(n) for sid, n in _pairs(found["restarts"] or "")}
        return MongoPosition({s: StreamPoint(None, False, t) for s, t in streams.items()}, restarts)
    raise ValueError(
        f"{text!r} is not a MongoDB position: expected one as cdc status prints it "
        "('streams at cluster times db.coll=7310...'), or a cluster time "
        "('Timestamp(1796622473, 2)' or its integer)"
    )


def _pairs(text: str) -> list[tuple[str, str]]:
    """``a=1, b=2`` as pairs (a stream id may hold ``=``: the value is after the last)."""
    pairs = []
    for item in text.split(", ") if text else []:
        name, equals, value = item.rpartition("=")
        if not equals or not name:
            raise ValueError(f"{item!r} is not stream=cluster time")
        pairs.append((name, value))
    return pairs


def _cluster_time(text: str) -> int | None:
    if text == "None":
        return None
    if not text.isdigit() or int(text) > _MAX:
        raise ValueError(f"{text!r} is not a cluster time")
    return int(text)


def reported_cluster_time(reply: Mapping[str, Any]) -> ClusterTime | None:
    """The newest cluster time a command's reply reports: its ``$clusterTime`` (the server's
    logical clock: at or after every write it acknowledged) or ``operationTime``; ``None`` when
    it reports neither (mongo-java-server, a standalone server)."""
    gossip = reply.get("$clusterTime")
    times = [
        t
        for t in (
            gossip.get("clusterTime") if isinstance(gossip, Mapping) else None,
            reply.get("operationTime"),
        )
        if isinstance(t, Timestamp)
    ]
    return max((ClusterTime.of(t) for t in times), key=lambda c: c.value, default=None)


class CurrentPosition:
    """Reads the server's cluster time: at or after every write acknowledged before the call.

    Keeps its client for the next call (a fence per write would otherwise pay a connection
    each) and opens a new one after an error; nothing connects before the first call.
    """

    def __init__(self, config: MongoSourceConfig) -> None:
        self._config = config
        self._client: MongoClient[dict[str, Any]] | None = None

    def __call__(self) -> ClusterTime:
        """The cluster time the server reports now.

        Raises:
            SourceUnavailable: the server cannot be reached (the message holds no secret).
            FenceError: the server reports no cluster time (not a replica set).
        """
        where = redact_url(self._config.dsn.get_secret_value())
        try:
            if self._client is None:
                self._client = client_for(self._config)
            reply = self._client.admin.command("ping")
        except px.PyMongoError as exc:
            self.close()
            why = redact_url(str(exc))
            raise SourceUnavailable(f"cannot read the cluster time of {where}: {why}") from None
        found = reported_cluster_time(reply)
        if found is None:
            raise FenceError(
                f"MongoDB at {where} reports no cluster time (not a replica set: a standalone "
                "server, or a test server such as mongo-java-server): --now needs a replica "
                "set or a sharded cluster; give --position instead, as cdc status prints it"
            )
        return found

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
