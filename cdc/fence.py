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
committed offsets reach the log's end offsets read after it.

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
from cdc.runtime.pipeline import sink_topics
from cdc.runtime.sink_task import group_name

DEFAULT_TIMEOUT_S = 30.0
FIRST_POLL_S = 0.0005
LAST_POLL_S = 0.005
#: On Kafka each look at the stored position reads the offsets topic to its end.
REMOTE_LAST_POLL_S = 0.05


def longest_poll_s(pipeline: Pipeline) -> float:
    """The longest pause between two polls for ``pipeline``'s log."""
    return LAST_POLL_S if pipeline.log.type == "embedded" else REMOTE_LAST_POLL_S


P_co = TypeVar("P_co", covariant=True)


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
        left = self._behind(ends)
        while left:
            poll.sleep(deadline, f"the sink to apply {left} more record(s) up to {target}")
            now = self._behind(ends)
            poll.moved(now != left)
            left = now
        return reached

    def _behind(self, ends: dict[TopicPartition, int]) -> int:
        return behind(ends, self._log.committed_offsets(self._group))


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
