"""Entry point ``jsonl`` of ``cdc.sinks``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cdc.contracts.checks import Check, writable_dir
from sinks.jsonl.config import JsonlSinkConfig
from sinks.jsonl.sink import STATE_FILE
from sinks.offsets import read_json, read_position

# What writes to the store is imported by the method that needs it: a command that only reads
# the pipeline's file loads the config, not the store's client library.
if TYPE_CHECKING:
    from cdc.contracts.sink import SinkContext
    from sinks.jsonl.sink import JsonlSink


class JsonlSinkPlugin:
    """Builds :class:`JsonlSink`."""

    config_model = JsonlSinkConfig
    rebuild_into = ("path",)  # cdc sink --rebuild --into: a copy in another directory
    # Not a single writer: on Kafka each worker writes the partitions it owns into its own
    # directory (its host's, or its own `path`); two workers given one directory wait on its
    # lock instead of interleaving.

    @staticmethod
    def create(config: JsonlSinkConfig, context: SinkContext) -> JsonlSink:
        from sinks.jsonl.sink import JsonlSink

        return JsonlSink(config, context)

    @staticmethod
    def read_consistent_position(config: JsonlSinkConfig, *, pipeline: str) -> str | None:
        """``cdc status``: the source position the state file holds with the offsets."""
        state = read_json(Path(config.path) / STATE_FILE)
        return read_position(state.get("offsets")) if isinstance(state, dict) else None

    @staticmethod
    def doctor(config: JsonlSinkConfig, pipeline_name: str) -> list[Check]:
        """``cdc doctor``: files can be created in the directory (or where it will be made)."""
        return [writable_dir("path", Path(config.path), "path")]
