"""Read-your-writes fences: wait until a sink holds every change committed up to a position.

An application writes to the source database, then calls :func:`wait` on the sink it reads
from (a cache, a search index); when it returns, the sink holds that write and every change
committed before it::

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE customers SET name = 'Ada' WHERE id = 42")
    cdc.fence.wait("shop.yaml", "cache")  # position=None: the source's position now
    redis.get("shop:public.customers:42")  # holds the new name

``cdc wait FILE --sink NAME [--position POS | --now] [--timeout-s S]`` is the same from a
shell. How it decides, from the log alone (no change to the log's format), is in
:mod:`cdc.runtime.consistency`: the source's stored position reaches the target, then the sink's
committed offsets reach the log's end offsets read after it. On a log whose offsets have gaps
(Kafka: a transaction's commit marker takes an offset of each partition it wrote), a partition
whose committed offset stops short of its end counts as reached when what lies between holds
no record a reader gets (:class:`_DataLeft`): the sink has nothing there to apply.

Polls back off from :data:`FIRST_POLL_S` to :data:`LAST_POLL_S` while nothing moves and start
again from the first whenever something does, so a fence answers within a few milliseconds of
the sink's commit without keeping a core busy while a sink is far behind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from cdc.config import pipeline as config_mod
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.errors import CdcError, Fatal
from cdc.log.base import Log, TopicPartition
from cdc.log.factory import open_log
from cdc.runtime.consistency import (
    DecodePosition,
    at_or_after,
    behind,
    log_ends,
    stored_position,
)
from cdc.runtime.sink_names import group_name, sink_topics

DEFAULT_TIMEOUT_S = 30.0
FIRST_POLL_S = 0.0005
LAST_POLL_S = 0.005
#: On Kafka each look at the stored position reads the offsets topic to its end.
REMOTE_LAST_POLL_S = 0.05


def longest_poll_s(pipeline: Pipeline) -> float:
    """The longest pause between two polls for ``pipeline``'s log."""
    return LAST_POLL_S if pipeline.log.type == "embedded" else REMOTE_LAST_POLL_S


P_co = TypeVar("P_co", covariant=True)


class FirstRecord(Protocol):
    """A gapped log's ``first_record_offset`` (:meth:`cdc.log.kafka.KafkaLog.first_record_offset`):
    the offset of a partition's first record a reader gets at or after ``start`` and below
    ``end``, ``None`` if none."""

    def __call__(self, topic: str, partition: int, start: int, end: int) -> int | None: ...


class PositionReader(Protocol[P_co]):
    """A source plugin's ``position_reader``: reads the source's current position on a
    connection it keeps between calls, until closed."""

    def __call__(self) -> P_co: ...

    def close(self) -> None: ...


def read_once(reader: PositionReader[P_co]) -> P_co:
    """One position from ``reader``, then its connection closed: a plugin's
    ``current_position`` (``cdc wait --now``, one fence) from its ``position_reader``."""
    try:
        return reader()
    finally:
        reader.close()


class FenceError(CdcError, Fatal):
    """A fence that cannot be set: an unknown sink, a position that is not the source's, or a
    source without positions to wait for (``cdc wait`` exits 2)."""


class FenceTimeout(CdcError, TimeoutError):
    """The sink did not reach the position in time (``cdc wait`` exits 1)."""


@dataclass(frozen=True)
class Hooks:
    """A source plugin's position hooks: decode stored offsets, parse a position's text, read
    the source's current position."""

    decode: DecodePosition
    parse: Any
    current: Any


def hooks(pipeline: Pipeline) -> Hooks:
    """The source plugin's position hooks.

    Raises:
        FenceError: the source type has none (it cannot be waited on).
    """
    plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
    decode, parse, current = (
        getattr(plugin, n, None) for n in ("position", "parse_position", "current_position")
    )
    if decode is None or parse is None or current is None:
        raise FenceError(f"source type {pipeline.source.type!r} has no positions to wait for")
    return Hooks(decode, parse, current)


def target_position(pipeline: Pipeline, found: Hooks, position: Any) -> Any:
    """The position to wait for: ``position`` parsed when it is text, the source's current
    position when ``None``, else ``position`` as given (a typed position).

    Raises:
        FenceError: the text is not a position of this source.
    """
    if position is None:
        return found.current(pipeline.source)
    if isinstance(position, str):
        try:
            return found.parse(position)
        except ValueError as exc:
            raise FenceError(
                f"invalid position for a {pipeline.source.type} source: {exc}"
            ) from None
    return position


def sink_config(pipeline: Pipeline, sink: str) -> Any:
    """The sink named ``sink``.

    Raises:
        FenceError: the pipeline has no such sink.
    """
    for config in pipeline.sinks:
        if config.name == sink:
            return config
    known = ", ".join(s.name for s in pipeline.sinks) or "none"
    raise FenceError(f"pipeline {pipeline.name!r} has no sink {sink!r} (its sinks: {known})")


def wait(
    pipeline_file: str | Path,
    sink: str,
    position: Any = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Any:
    """Block until ``sink`` holds every change committed in the source up to ``position``.

    Args:
        pipeline_file: the pipeline's YAML file.
        sink: the sink's name in it.
        position: the source position (its text as ``cdc status`` prints it, e.g.
            ``'0/16B3748'``, or a typed position); ``None``: the source's position now
            (PostgreSQL: ``pg_current_wal_lsn()``; MongoDB: the server's cluster time).
        timeout_s: how long to wait at most.

    Returns:
        The source position the sink is now consistent up to (at or after ``position``).

    Raises:
        FenceError: an unknown sink, an invalid position, a source without positions.
        FenceTimeout: not reached within ``timeout_s``.
        ConfigError: the pipeline file is invalid.
    """
    with Fences(pipeline_file) as fences:
        return fences.wait(sink, position, timeout_s)


class Fences:
    """The pipeline file loaded and its log open, for many fences (an application's loop of
    write, wait, read): :func:`wait` without loading the file and opening the log each time.

    Raises:
        FenceError: the source has no positions to wait for.
        ConfigError: the pipeline file is invalid.
    """

    def __init__(self, pipeline_file: str | Path) -> None:
        self.pipeline = config_mod.load(str(pipeline_file))
        self._hooks = hooks(self.pipeline)
        plugin = plugins.load(plugins.SOURCE_GROUP, self.pipeline.source.type)
        reader = getattr(plugin, "position_reader", None)
        # One connection to the source for every fence, when its plugin can keep one.
        self._current: PositionReader[Any] | None = (
            None if reader is None else reader(self.pipeline.source)
        )
        self._log = open_log(self.pipeline)

    def wait(self, sink: str, position: Any = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
        """See :func:`wait`."""
        config = sink_config(self.pipeline, sink)
        if position is None and self._current is not None:
            position = self._current()
        target = target_position(self.pipeline, self._hooks, position)
        group, topics = group_name(self.pipeline.name, sink), sink_topics(self.pipeline, config)
        fence = Fence(self._log, group, topics, longest_poll_s(self.pipeline))
        return fence.wait(self._hooks.decode, target, timeout_s)

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
        self._log.close()

    def __enter__(self) -> Fences:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Fence:
    """Waits on one sink of an open log (:func:`wait` opens it; a caller that keeps a log open
    sets many fences on one)."""

    def __init__(
        self, log: Log, group: str, topics: list[str], longest_s: float = LAST_POLL_S
    ) -> None:
        self._log, self._group, self._topics = log, group, topics
        self._longest_s = longest_s
        # Only a log whose offsets have gaps has it (Kafka); the embedded log's offsets are
        # its records, one after the other.
        self._first_record: FirstRecord | None = getattr(log, "first_record_offset", None)

    def wait(self, decode: DecodePosition, target: Any, timeout_s: float) -> Any:
        """See :func:`wait`; returns the stored position the sink reached."""
        deadline = time.monotonic() + timeout_s
        poll = _Backoff(self._longest_s)
        reached = stored_position(self._log, decode)
        while not at_or_after(reached, target):
            poll.sleep(deadline, f"the source's stored position {reached} to reach {target}")
            now = stored_position(self._log, decode)
            poll.moved(now != reached)
            reached = now
        # Read after the position: every record of a change up to it is below these ends.
        ends = log_ends(self._log, self._topics)
        data = None if self._first_record is None else _DataLeft(self._first_record, ends)
        left = self._behind(ends, data)
        while left:
            poll.sleep(deadline, f"the sink to apply {left} more record(s) up to {target}")
            now = self._behind(ends, data)
            poll.moved(now != left)
            left = now
        return reached

    def _behind(self, ends: dict[TopicPartition, int], data: _DataLeft | None) -> int:
        committed = self._log.committed_offsets(self._group)
        if data is not None:
            committed = data.passed(committed)
        return behind(ends, committed)


class _DataLeft:
    """Which partitions still hold records for the sink below the fence's ends, on a log whose
    offsets have gaps.

    On Kafka the ends count each transaction's commit marker, and a sink's group commits past
    the markers that follow its last record only once its consumer has served them, with its
    next commit or after a poll that came back empty (``KafkaConsumer._commit_past_markers``,
    0.2 s on a sink task); a fence that waited for that commit returned some 0.3 s after the
    sink held the write. Where the group's committed offset stops short of a partition's end,
    one read_committed read of the partition from there tells whether a record lies between:
    if none does, the sink holds everything below the end. Only a partition whose committed
    offset stayed where the previous look found it (or at the first look) is read, so a sink
    busy catching up costs a read only where its commits pause, and what a read found is
    remembered: records below a read's end are decided (the end is a last stable offset), so a
    record found stays the sink's to pass, and a stretch found empty stays empty (compaction
    only removes).
    """

    def __init__(self, first_record: FirstRecord, ends: dict[TopicPartition, int]) -> None:
        self._first_record, self._ends = first_record, ends
        self._empty_from: dict[TopicPartition, int] = {}  # nothing to read from here to the end
        self._record_at: dict[TopicPartition, int] = {}  # a record the sink must pass
        self._last: dict[TopicPartition, int] | None = None  # committed at the previous look

    def passed(self, committed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """``committed``, with each partition that has nothing left to read up to its end
        counted at its end."""
        out = dict(committed)
        for tp, end in self._ends.items():
            offset = committed.get(tp, 0)
            if offset < end and not self._left(tp, offset, end):
                out[tp] = end
        self._last = dict(committed)
        return out

    def _left(self, tp: TopicPartition, offset: int, end: int) -> bool:
        if offset <= self._record_at.get(tp, -1):
            return True
        if offset >= self._empty_from.get(tp, end):
            return False
        if self._last is not None and self._last.get(tp, 0) != offset:
            return True  # the sink is moving: look again once it stops
        found = self._first_record(tp.topic, tp.partition, offset, end)
        if found is None:
            self._empty_from[tp] = offset
            return False
        self._record_at[tp] = found
        return True


class _Backoff:
    """Sleeps between polls: short while things move, longer while they do not."""

    def __init__(self, longest_s: float) -> None:
        self._interval, self._longest_s = FIRST_POLL_S, longest_s

    def moved(self, moved: bool) -> None:
        self._interval = FIRST_POLL_S if moved else min(self._longest_s, self._interval * 2)

    def sleep(self, deadline: float, waiting_for: str) -> None:
        """Sleep one interval (never past ``deadline``).

        Raises:
            FenceTimeout: the deadline has passed.
        """
        left = deadline - time.monotonic()
        if left <= 0:
            raise FenceTimeout(f"timed out waiting for {waiting_for}")
        time.sleep(min(self._interval, left))
