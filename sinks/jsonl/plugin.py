"""Entry point ``jsonl`` of ``cdc.sinks``."""

from __future__ import annotations

from cdc.sink import SinkContext
from sinks.jsonl.config import JsonlSinkConfig
from sinks.jsonl.sink import JsonlSink


class JsonlSinkPlugin:
    """Builds :class:`JsonlSink`."""

    config_model = JsonlSinkConfig

    @staticmethod
    def create(config: JsonlSinkConfig, context: SinkContext) -> JsonlSink:
        return JsonlSink(config, context)
