"""The source position a sink is consistent up to, read from the log alone.

Why the log alone suffices: the source stores its offsets (its position ``P``) in the same log
transaction as the records of every change up to ``P``, and a sink's consumer group commits an
offset only after the sink made everything before it durable (:mod:`cdc.runtime.sink_task`).
So, read in this order:

1. the stored source position ``P``;
2. then the end offsets ``E`` of the sink's topics (read after ``P``: every record of a change at
   or before ``P`` lies below ``E``);
3. then the sink's committed offsets: once they reach ``E`` on every partition, the sink holds
   every change committed in the source up to ``P``.

A source stores its offsets on idle keepalives too (the PostgreSQL source: WAL that passed with
no captured change), so ``P`` keeps up with the server's position while nothing is captured.

:class:`ConsistencyTracker` is the sink task's running form: a short queue of ``(P, E)``
samples; once the committed offsets pass a sample's ``E``, the sink is consistent up to its
``P``. :func:`cdc.fence.wait` uses the same steps to wait for one position.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cdc.contracts import snapshot_offsets
from cdc.contracts.errors import LogError
from cdc.contracts.positions import Offsets
from cdc.log.base import Log, TopicPartition
from cdc.log.offsets import end_offsets

#: A source plugin's ``position`` hook: the typed position its stored offsets hold, or ``None``.
DecodePosition = Callable[[Offsets], Any]

#: Samples kept while the sink is behind: enough to step forward as it catches up; when full,
#: the newest replaces the last, so the queue spans the whole backlog.
MAX_SAMPLES = 32


def stored_position(log: Log, decode: DecodePosition) -> Any:
    """The source position stored in the log now, as one a sink can be consistent with:
    ``None`` while none is stored, and while an initial snapshot is unfinished
    (:func:`loading`): the position is stored when the snapshot starts, and the rows committed
    before it reach the log chunk by chunk after."""
    offsets = log.source_offsets()
    return None if loading(offsets) else decode(offsets)


def loading(offsets: Offsets) -> bool:
    """An initial snapshot of a table (at the first start, or of a table added to the file) is
    unfinished: its rows are the only way to changes committed before the stream began. A
    re-snapshot (``cdc snapshot``, kind ``incremental``) re-reads rows the stream carried."""
    found = snapshot_offsets.read(offsets)
    return found is not None and any(t.kind == "initial" and not t.done for t in found.tables)


def log_ends(log: Log, topics: Sequence[str]) -> dict[TopicPartition, int]:
    """The end offset of every partition of ``topics`` (none for a topic not created yet)."""
    return {
        TopicPartition(topic, partition): end
        for topic in topics
        for partition, end in end_offsets(log, topic).items()
    }


def behind(ends: Mapping[TopicPartition, int], committed: Mapping[TopicPartition, int]) -> int:
    """Records below ``ends`` that ``committed`` has not passed (0: the sink holds them all)."""
    return sum(max(0, end - committed.get(tp, 0)) for tp, end in ends.items())


def at_or_after(position: Any, target: Any) -> bool:
    """``position`` is at or after ``target`` (positions are ordered by ``<``; MongoDB's
    partially: one not behind in any stream counts)."""
    return position is not None and not position < target


class ConsistencyTracker:
    """The position a sink task is consistent up to, from ``(P, E)`` samples.

    Args:
        log: the pipeline's log.
        group: the sink's consumer group (its committed offsets are the sink's progress).
        topics: the sink's topics.
        decode: the source plugin's ``position`` hook.
        every_s: the least time between two samples (each reads the log three times).
    """

    def __init__(
        self,
        log: Log,
        group: str,
        topics: Sequence[str],
        decode: DecodePosition,
        every_s: float = 0.2,
    ) -> None:
        self._log, self._group, self._topics, self._decode = log, group, list(topics), decode
        self._every_s = every_s
        self._samples: deque[tuple[Any, dict[TopicPartition, int]]] = deque()
        #: The newest sample the committed offsets passed: :meth:`reached` still counts it.
        self._passed: tuple[Any, dict[TopicPartition, int]] | None = None
        self._last = -every_s
        #: The source position the sink holds everything up to (``None``: not known yet).
        self.position: Any = None

    def tick(self) -> bool:
        """Take a sample and advance :attr:`position`, at most every ``every_s``; True when
        it moved."""
        now = time.monotonic()
        if now - self._last < self._every_s:
            return False
        self._last = now
        try:
            self._sample()
            committed = self._log.committed_offsets(self._group)
        except LogError:
            return False  # the log away for a moment: the next tick samples again
        moved = False
        while self._samples and not behind(self._samples[0][1], committed):
            self._passed = self._samples.popleft()
            position = self._passed[0]
            if self.position is None or not position < self.position:
                moved = moved or position != self.position
                self.position = position
        return moved

    def reached(self, offsets: Mapping[TopicPartition, int]) -> Any:
        """The newest sampled position that ``offsets`` (next offsets to read) make the sink
        consistent up to, or ``None``.

        Unlike :attr:`position`, only samples whose ends ``offsets`` pass count: after a table
        reset (offsets back to 0) nothing older is claimed. Samples are in the order they were
        taken, so their positions and ends only grow.
        """
        found = None
        for position, ends in (*((self._passed,) if self._passed else ()), *self._samples):
            if behind(ends, offsets):
                break
            found = position
        return found

    def _sample(self) -> None:
        position = stored_position(self._log, self._decode)  # P, then E: the order matters
        if position is None:
            return
        if self._samples and self._samples[-1][0] == position:
            return  # the first E read after this P is the tightest bound (E only grows)
        ends = log_ends(self._log, self._topics)
        if len(self._samples) >= MAX_SAMPLES:
            self._samples[-1] = (position, ends)
        else:
            self._samples.append((position, ends))
