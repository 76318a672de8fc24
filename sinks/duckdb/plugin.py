"""Entry point ``duckdb`` of ``cdc.sinks``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cdc.contracts.sink import SinkContext
from sinks.duckdb import as_of as point_in_time
from sinks.duckdb import doctor as preflight
from sinks.duckdb import position as stored_position
from sinks.duckdb import reader
from sinks.duckdb import trace as key_trace
from sinks.duckdb.config import DuckDBSinkConfig
from sinks.duckdb.sink import DuckDBSink


class DuckDBSinkPlugin:
    """Builds :class:`DuckDBSink`; :meth:`read_rows` reads a table back for ``cdc verify``."""

    config_model = DuckDBSinkConfig
    rebuild_into = ("path",)  # cdc sink --rebuild --into: a copy in another file
    rebuild_as_of = staticmethod(point_in_time.rebuild_as_of)  # --rebuild --into --as-of (history)
    rows_decoded = True  # read_rows gives DuckDB's typed values, not the envelope's encoding
    single_writer = True  # one writing process per file: other workers stand by (on Kafka)

    @staticmethod
    def create(config: DuckDBSinkConfig, context: SinkContext) -> DuckDBSink:
        return DuckDBSink(config, context)

    @staticmethod
    def read_rows(
        config: DuckDBSinkConfig, schema: str, table: str, *, pipeline: str | None = None
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(key, row)`` of every current row of ``schema.table`` (see :mod:`.reader`);
        ``pipeline`` is not needed, the file is the sink's own. JSON documents come as their
        text, which :func:`cdc.records.normalize.canonical` reads (a parsed ``"str"`` would not
        be)."""
        return reader.read_rows(Path(config.path), schema, table, json_text=True)

    read_key = staticmethod(key_trace.read_key)  # cdc trace: one key's row and position
    doctor = staticmethod(preflight.doctor)  # cdc doctor: the file opens, or can be created
    # cdc status: the source position stored with the offsets
    read_consistent_position = staticmethod(stored_position.read_consistent_position)
