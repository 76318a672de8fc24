"""Each sink's consistent source position for ``cdc status``: the position up to which it
holds every change (:mod:`cdc.runtime.consistency`, what ``cdc wait`` waits for)."""

from __future__ import annotations

from typing import Any

from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.log.base import Log
from cdc.runtime.consistency import behind, log_ends, stored_position
from cdc.runtime.pipeline import sink_topics
from cdc.runtime.sink_task import group_name


def consistent_positions(
    log: Log, pipeline: Pipeline, processes: list[dict[str, Any]]
) -> dict[str, str | None]:
    """Per sink: the source's stored position when the sink has applied everything up to it
    now (read as ``cdc wait`` does), else the last one its process published in a beat
    (:mod:`cdc.runtime.heartbeat`); ``None`` when neither is known."""
    decode = getattr(plugins.load(plugins.SOURCE_GROUP, pipeline.source.type), "position", None)
    position = None if decode is None else stored_position(log, decode)
    found: dict[str, str | None] = {}
    for sink in pipeline.sinks:
        caught_up = False
        if position is not None:  # the ends are read after the position (the order matters)
            ends = log_ends(log, sink_topics(pipeline, sink))
            caught_up = not behind(
                ends, log.committed_offsets(group_name(pipeline.name, sink.name))
            )
        found[sink.name] = str(position) if caught_up else published(processes, sink.name)
    return found


def published(processes: list[dict[str, Any]], sink: str) -> str | None:
    """The consistent position of ``sink`` in the newest beat that has one."""
    beats = [p for p in processes if (p.get("consistent") or {}).get(sink) is not None]
    if not beats:
        return None
    newest = max(beats, key=lambda p: int(p.get("beat_ms") or 0))
    return str(newest["consistent"][sink])
