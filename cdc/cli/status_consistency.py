"""Each sink's consistent source position for ``cdc status``: the position up to which it
holds every change (:mod:`cdc.runtime.consistency`, what ``cdc wait`` waits for), and the one
a sink stored beside its offsets in its own store (:class:`cdc.contracts.sink.PositionedSink`),
read there while no process runs the sink."""

from __future__ import annotations

from typing import Any

from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.errors import CdcError
from cdc.log.base import Log
from cdc.runtime import heartbeat
from cdc.runtime.consistency import behind, log_ends, stored_position
from cdc.runtime.sink_names import group_name, sink_topics


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


def stored_positions(pipeline: Pipeline, processes: list[dict[str, Any]]) -> dict[str, str]:
    """Per sink that no running process serves and whose plugin reads it back
    (``read_consistent_position``): the position its store holds with its offsets. A running
    sink's is not read: it moves, and the live one above is exact. A store that cannot be
    read now is left out (status reports what it can)."""
    found: dict[str, str] = {}
    for sink in pipeline.sinks:
        if heartbeat.runs_sink(processes, sink.name):
            continue
        read = getattr(
            plugins.load(plugins.SINK_GROUP, sink.type), "read_consistent_position", None
        )
        try:
            position = None if read is None else read(sink, pipeline=pipeline.name)
        except (CdcError, OSError):
            continue
        if position is not None:
            found[sink.name] = str(position)
    return found
