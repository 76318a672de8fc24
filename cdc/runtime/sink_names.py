"""What a sink reads on the log: its topics and its consumer group.

Commands that report on a pipeline (``cdc status``, ``cdc wait``, ``cdc sink``...) need these
names and nothing of the runtime that runs it, so they live apart from
:mod:`cdc.runtime.pipeline` and :mod:`cdc.runtime.sink_task`, whose imports (the metrics, the
sink task's decoding) every such command paid for at start.
"""

from __future__ import annotations

from cdc.config.models import SinkConfig
from cdc.config.pipeline import Pipeline
from cdc.contracts.events import topic_name


def group_name(pipeline: str, sink: str) -> str:
    """The consumer group of a sink; ``cdc status`` reads lag through it."""
    return f"{pipeline}.sink.{sink}"


def sink_topics(pipeline: Pipeline, config: SinkConfig) -> list[str]:
    """The topics ``config``'s sink consumes: one per table it takes."""
    return [topic_name(pipeline.name, s, t) for s, t in pipeline.sink_tables(config)]
