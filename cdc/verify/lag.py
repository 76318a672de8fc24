"""``cdc verify``'s first step: which sinks are behind the log, so that they are reported
LAGGING, with their offsets, instead of being compared (every change still in flight would be
a difference)."""

from __future__ import annotations

import contextlib
from typing import Any

from cdc.contracts.events import topic_name
from cdc.log.base import Log, TopicPartition
from cdc.log.offsets import end_offsets
from cdc.runtime.sink_control import SinkControl
from cdc.runtime.sink_names import group_name
from cdc.support.wait import WaitTimeout, wait_until


def lagging(
    log: Log,
    pipeline: str,
    tables: dict[str, list[tuple[str, str]]],
    wait_s: float = 0.0,
    poll_s: float = 0.5,
) -> dict[tuple[str, str], dict[str, Any]]:
    """The ``(sink, "schema.table")`` whose topic the sink has not consumed up to the end
    offsets read now, or is rebuilding after a table reset, after waiting up to ``wait_s``.

    Each is described by ``{"topic", "records", "partitions": {p: {"committed", "end"}},
    "rebuilding", "sink_state", "reason"}``: how far behind it is, the reset it is rebuilding
    the table for (its committed offsets are the old ones until the rebuild commits), and why,
    if an error stopped the sink.
    """
    goals = {
        (sink, f"{s}.{t}"): (topic, end_offsets(log, topic))
        for sink, names in tables.items()
        for s, t in names
        for topic in [topic_name(pipeline, s, t)]
    }
    control = SinkControl(log, pipeline)
    behind: dict[tuple[str, str], dict[str, Any]] = {}

    def caught_up() -> bool:
        behind.clear()
        behind.update(_behind(log, pipeline, goals, control))
        return not behind

    with contextlib.suppress(WaitTimeout):  # then those still behind are the answer
        wait_until(caught_up, wait_s, poll_s)
    return behind


def _behind(
    log: Log,
    pipeline: str,
    goals: dict[tuple[str, str], tuple[str, dict[int, int]]],
    control: SinkControl,
) -> dict[tuple[str, str], dict[str, Any]]:
    behind = {}
    committed: dict[str, dict[TopicPartition, int]] = {}
    for (sink, name), (topic, ends) in goals.items():
        if sink not in committed:
            committed[sink] = log.committed_offsets(group_name(pipeline, sink))
        done = committed[sink]
        late = {
            str(p): {"committed": done.get(TopicPartition(topic, p), 0), "end": end}
            for p, end in ends.items()
            if done.get(TopicPartition(topic, p), 0) < end
        }
        rebuilding = [r.id for r in control.rebuilding(sink) if r.table == name]
        if late or rebuilding:
            state = control.state(sink) or {}
            behind[(sink, name)] = {
                "topic": topic,
                "records": sum(v["end"] - v["committed"] for v in late.values()),
                "partitions": late,
                "rebuilding": rebuilding[0] if rebuilding else None,
                "sink_state": state.get("state", "unknown"),
                "reason": state.get("reason"),
            }
    return behind
