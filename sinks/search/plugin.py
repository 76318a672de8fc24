"""Entry point ``search`` of ``cdc.sinks``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cdc.contracts.checks import Check, writable_dir
from cdc.support import lazy
from sinks.offsets import read_json, read_position
from sinks.search.config import SearchSinkConfig

# What writes to the store is imported by the method that needs it: a command that only reads
# the pipeline's file loads the config, not the store's client library.
if TYPE_CHECKING:
    from cdc.contracts.sink import SinkContext
    from sinks.search.sink import SearchSink


class SearchSinkPlugin:
    """Builds :class:`SearchSink`; :meth:`read_rows` serves ``cdc verify``, :meth:`search`
    serves ``cdc search``."""

    config_model = SearchSinkConfig
    # Its client library, imported when the sink runs: checked at load (cdc.contracts.plugins).
    requires = ("tantivy",)
    rebuild_into = ("path",)  # cdc sink --rebuild --into: a copy in another directory
    single_writer = True  # Tantivy's index takes one writer: other workers stand by (on Kafka)

    @staticmethod
    def create(config: SearchSinkConfig, context: SinkContext) -> SearchSink:
        from sinks.search.sink import SearchSink

        return SearchSink(config, context)

    read_rows = lazy.Attribute("sinks.search.reader", "read_rows")
    # cdc trace: one key's row and position
    read_key = lazy.Attribute("sinks.search.trace", "read_key")
    search = lazy.Attribute("sinks.search.reader", "search")

    @staticmethod
    def read_consistent_position(config: SearchSinkConfig, *, pipeline: str) -> str | None:
        """``cdc status``: the source position the offsets file holds with the offsets."""
        from sinks.search.sink import offsets_file

        stored = read_json(offsets_file(config))
        return read_position(stored) if isinstance(stored, dict) else None

    @staticmethod
    def doctor(config: SearchSinkConfig, pipeline_name: str) -> list[Check]:
        """``cdc doctor``: the index directory is writable (or can be created)."""
        return [writable_dir("path", Path(config.path), "path")]
