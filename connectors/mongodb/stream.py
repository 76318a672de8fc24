"""One change stream: open it at a stored point, read events, and know its resume point.

The resume point advances only when the source hands an event to a batch (:meth:`advance`), or
when the server reports a post-batch resume token after an empty read (:meth:`idle_point`), so
what the source stores is always "everything up to here is in the log".

A real server's resume token of a data change holds the document's ``_id`` (hex-encoded in
``_data``). For a collection whose ``_id`` is masked that value must not be stored, so after
such a change the point is its cluster time alone (``startAtOperationTime``, which replays the
changes of that cluster time on a resume: harmless, the sinks skip what they hold).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from pymongo import MongoClient
from pymongo import errors as px
from pymongo.change_stream import ChangeStream

from connectors.mongodb import positions
from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.plan import StreamSpec

Doc = dict[str, Any]


def _target(client: MongoClient[Doc], spec: StreamSpec) -> Any:
    if spec.db is None:
        return client
    database = client[spec.db]
    return database if spec.coll is None else database[spec.coll]


def start_point(client: MongoClient[Doc], spec: StreamSpec) -> tuple[Doc | None, int | None]:
    """Where a stream opened now would start: its resume token and/or cluster time.

    Opens the change stream with a raw ``aggregate`` to read both the post-batch resume token
    (real servers) and the reply's ``operationTime`` (mongo-java-server only gives the latter),
    then kills the cursor.
    """
    options: Doc = {"allChangesForCluster": True} if spec.db is None else {}
    command: Doc = {
        "aggregate": spec.coll or 1,
        "pipeline": [{"$changeStream": options}],
        "cursor": {},
    }
    database = client.admin if spec.db is None else client[spec.db]
    reply = database.command(command)
    cursor = reply.get("cursor", {})
    token = cursor.get("postBatchResumeToken")
    optime = reply.get("operationTime") or reply.get("$clusterTime", {}).get("clusterTime")
    if cursor.get("id"):
        database.command({"killCursors": spec.coll or "$cmd.aggregate", "cursors": [cursor["id"]]})
    when = positions.position(optime) if optime is not None else positions.token_position(token)
    return token, when


def _namespace(event: Mapping[str, Any]) -> tuple[str, str] | None:
    ns = event.get("ns")
    if not isinstance(ns, Mapping):
        return None
    return str(ns.get("db")), str(ns.get("coll"))


class StreamReader:
    """Reads one change stream (see the module docstring)."""

    def __init__(
        self,
        client: MongoClient[Doc],
        spec: StreamSpec,
        config: MongoSourceConfig,
        stages: list[Doc] | None = None,
        tokenless: frozenset[tuple[str, str]] = frozenset(),
    ):
        """Args beyond the obvious: ``stages`` follow the spec's own ``$match`` (the filters'
        stages); ``tokenless`` are the collections whose change tokens are not stored."""
        self.spec = spec
        self._client = client
        self._config = config
        self._stages = list(stages or [])
        self._tokenless = tokenless
        self._withheld: Doc | None = None  # the last token not stored
        self._stream: ChangeStream[Doc] | None = None
        self._pending: Doc | None = None
        self.token: Doc | None = None
        self.start_after = False
        self.cluster_time: int | None = None
        self._last_position = -1
        self._sequence = 0

    def open(self, entry: Mapping[str, Any]) -> None:
        """Open at a stored point: a token (``resumeAfter``/``startAfter``) or a cluster time.

        Raises:
            pymongo.errors.PyMongoError: translated by the caller, which knows what to do
                when the point cannot be resumed from.
        """
        stored_token = entry.get("resume_token")
        self.token = None if stored_token is None else positions.token_from_json(stored_token)
        self.start_after = bool(entry.get("start_after"))
        self.cluster_time = entry.get("cluster_time")
        self._open()

    def _open(self) -> None:
        kwargs: Doc = {
            "full_document": self._config.full_document,
            "max_await_time_ms": self._config.max_await_ms,
            "batch_size": min(self._config.max_batch_events, 10_000),
        }
        if self._config.full_document == "required":
            kwargs["full_document_before_change"] = "required"
        if self.token is not None:
            kwargs["start_after" if self.start_after else "resume_after"] = self.token
        elif self.cluster_time is not None:
            kwargs["start_at_operation_time"] = positions.timestamp(self.cluster_time)
        pipeline = self.spec.match() + self._stages
        self._stream = _target(self._client, self.spec).watch(pipeline, **kwargs)
        # The first getMore surfaces a refused resume point here, not in the middle of a poll.
        self._pending = self._stream.try_next()

    def next(self) -> Doc | None:
        """The next event, or ``None`` when the server has nothing now (waits ``max_await``)."""
        if self._pending is not None:
            event, self._pending = self._pending, None
            return event
        assert self._stream is not None, "open() first"
        return self._stream.try_next()

    def push_back(self, event: Doc) -> None:
        """Return an event read one too far (the next poll starts with it)."""
        self._pending = event

    def advance(self, event: Mapping[str, Any]) -> int:
        """Take ``event`` as handed on; returns its sequence among events of its cluster time."""
        self.token = dict(event["_id"])
        if self._tokenless and _namespace(event) in self._tokenless:
            self._withheld, self.token = self.token, None
        self.start_after = False
        now = positions.position(event["clusterTime"])
        self._sequence = self._sequence + 1 if now == self._last_position else 0
        self._last_position = self.cluster_time = now
        return self._sequence

    def idle_point(self) -> bool:
        """Adopt the post-batch resume token of an empty read; ``True`` if it moved."""
        if self._stream is None or self._pending is not None:
            return False
        token = self._stream.resume_token
        if token is None or token == self.token or token == self._withheld:
            return False
        self.token = dict(token)
        self.start_after = False
        moved = positions.token_position(self.token)
        if moved is not None:
            self.cluster_time = moved
        return True

    def restart_after_invalidate(self, event: Mapping[str, Any]) -> None:
        """Reopen with ``startAfter`` the invalidate token (``resumeAfter`` refuses it)."""
        self.close()
        self.token, self.start_after = dict(event["_id"]), True
        self.cluster_time = positions.position(event["clusterTime"])
        self._open()

    def entry(self) -> Doc:
        return positions.stream_entry(self.token, self.cluster_time, self.start_after)

    def close(self) -> None:
        stream, self._stream = self._stream, None
        self._pending = None
        if stream is not None:
            # The server or connection may be gone; nothing is left to release then.
            with contextlib.suppress(px.PyMongoError):
                stream.close()
