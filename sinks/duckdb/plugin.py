"""Entry point ``duckdb`` of ``cdc.sinks``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdc.support import lazy
from sinks.duckdb.config import DuckDBSinkConfig

# What writes to the store is imported by the method that needs it: a command that only reads
# the pipeline's file loads the config, not the store's client library.
if TYPE_CHECKING:
    from cdc.contracts.sink import SinkContext
    from sinks.duckdb.sink import DuckDBSink


class DuckDBSinkPlugin:
    """Builds :class:`DuckDBSink`; :meth:`read_rows` reads a table back for ``cdc verify``."""

    config_model = DuckDBSinkConfig
    # Its client library, imported when the sink runs: checked at load (cdc.contracts.plugins).
    requires = ("duckdb",)
    rebuild_into = ("path",)  # cdc sink --rebuild --into: a copy in another file
    # --rebuild --into --as-of (history)
    rebuild_as_of = lazy.Attribute("sinks.duckdb.as_of", "rebuild_as_of")
    rows_decoded = True  # read_rows gives DuckDB's typed values, not the envelope's encoding
    single_writer = True  # one writing process per file: other workers stand by (on Kafka)

    @staticmethod
    def create(config: DuckDBSinkConfig, context: SinkContext) -> DuckDBSink:
        from sinks.duckdb.sink import DuckDBSink

        return DuckDBSink(config, context)

    @staticmethod
    def read_rows(
        config: DuckDBSinkConfig, schema: str, table: str, *, pipeline: str | None = None
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``(key, row)`` of every current row of ``schema.table`` (see :mod:`.reader`);
        ``pipeline`` is not needed, the file is the sink's own. JSON documents come as their
        text, which :func:`cdc.records.normalize.canonical` reads (a parsed ``"str"`` would not
        be)."""
        from sinks.duckdb import reader

        return reader.read_rows(Path(config.path), schema, table, json_text=True)

    # cdc trace: one key's row and position
    read_key = lazy.Attribute("sinks.duckdb.trace", "read_key")
    # cdc doctor: the file opens, or can be created
    doctor = lazy.Attribute("sinks.duckdb.doctor", "doctor")
    # cdc status: the source position stored with the offsets
    read_consistent_position = lazy.Attribute("sinks.duckdb.position", "read_consistent_position")
