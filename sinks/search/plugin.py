"""Entry point ``search`` of ``cdc.sinks``."""

from __future__ import annotations

from pathlib import Path

from cdc.contracts.checks import Check, writable_dir
from cdc.contracts.sink import SinkContext
from sinks.offsets import read_json, read_position
from sinks.search import reader
from sinks.search import trace as key_trace
from sinks.search.config import SearchSinkConfig
from sinks.search.sink import SearchSink, offsets_file


class SearchSinkPlugin:
    """Builds :class:`SearchSink`; :meth:`read_rows` serves ``cdc verify``, :meth:`search`
    serves ``cdc search``."""

    config_model = SearchSinkConfig
    rebuild_into = ("path",)  # cdc sink --rebuild --into: a copy in another directory
    single_writer = True  # Tantivy's index takes one writer: other workers stand by (on Kafka)

    @staticmethod
    def create(config: SearchSinkConfig, context: SinkContext) -> SearchSink:
        return SearchSink(config, context)

    read_rows = staticmethod(reader.read_rows)
    read_key = staticmethod(key_trace.read_key)  # cdc trace: one key's row and position
    search = staticmethod(reader.search)

    @staticmethod
    def read_consistent_position(config: SearchSinkConfig, *, pipeline: str) -> str | None:
        """``cdc status``: the source position the offsets file holds with the offsets."""
        stored = read_json(offsets_file(config))
        return read_position(stored) if isinstance(stored, dict) else None

    @staticmethod
    def doctor(config: SearchSinkConfig, pipeline_name: str) -> list[Check]:
        """``cdc doctor``: the index directory is writable (or can be created)."""
        return [writable_dir("path", Path(config.path), "path")]
