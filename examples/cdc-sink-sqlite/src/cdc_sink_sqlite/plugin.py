"""Entry point ``sqlite`` of ``cdc.sinks``: what ``type: sqlite`` in a pipeline file names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cdc.contracts.checks import Check
from cdc.contracts.sink import SinkContext

from cdc_sink_sqlite import doctor as preflight
from cdc_sink_sqlite import reader
from cdc_sink_sqlite.config import SqliteSinkConfig
from cdc_sink_sqlite.sink import SqliteSink


class SqliteSinkPlugin:
    """Builds :class:`SqliteSink`; reads a table back for ``cdc verify``; checks for
    ``cdc doctor``."""

    config_model = SqliteSinkConfig
    # SQLite takes one writing connection at a time: on Kafka, one worker of this sink writes
    # and the others stand by.
    single_writer = True

    @staticmethod
    def create(config: SqliteSinkConfig, context: SinkContext) -> SqliteSink:
        return SqliteSink(config, context)

    @staticmethod
    def read_rows(
        config: SqliteSinkConfig, schema: str, table: str, *, pipeline: str | None = None
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(key, row)`` of every current row of ``schema.table`` (``pipeline`` is not needed:
        the file is the sink's own)."""
        return reader.read_rows(Path(config.path), schema, table, config.busy_timeout_s)

    @staticmethod
    def doctor(config: SqliteSinkConfig, pipeline_name: str) -> list[Check]:
        return preflight.doctor(config, pipeline_name)
