"""The ``duckdb`` sink's section of a pipeline file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cdc.config.models import SinkConfig

#: What DuckDB's ``memory_limit`` parses: a number with a unit (1000- or 1024-based) or a
#: percentage of the machine's memory; checked here so a typo is a config error, not a failed start.
MEMORY_PATTERN = r"(?i)^\s*\d+(\.\d+)?\s*(%|b|bytes|[kmgt]i?b?)\s*$"
MEMORY_LIMIT = "256MiB"
#: A size DuckDB parses (no percentage), for ``checkpoint_threshold``.
SIZE_PATTERN = r"(?i)^\s*\d+(\.\d+)?\s*(b|bytes|[kmgt]i?b?)\s*$"


class DuckDBSinkConfig(SinkConfig):
    """A DuckDB warehouse file.

    Attributes:
        path: the database file; its directory is created if missing.
        mode: ``current`` keeps the current state of each table; ``history`` also keeps every
            version in ``<table>__history`` (slowly changing dimension, type 2).
        threads: DuckDB worker threads (default: DuckDB's, one per core).
        memory_limit: DuckDB's buffer manager limit, e.g. ``"2GB"``, ``"512MiB"`` or ``"10%"``
            of the machine's memory (default :data:`MEMORY_LIMIT`, where DuckDB's own is 80%
            of the machine's memory: the sink merges one batch at a time, and a table larger
            than the limit is read back from the file instead of held).
        checkpoint_threshold: how much write-ahead log DuckDB gathers before a checkpoint
            (DuckDB's default, 16MB, when unset). Each checkpoint rewrites the table's last row
            group, which for a table of large values (1 MB text) holds every row: a larger
            threshold (e.g. ``256MB``) checkpoints less often, for a longer WAL replay after a
            crash.
    """

    type: Literal["duckdb"] = "duckdb"
    path: str = Field(min_length=1)
    mode: Literal["current", "history"] = "current"
    threads: int | None = Field(default=None, ge=1)
    memory_limit: str | None = Field(default=MEMORY_LIMIT, pattern=MEMORY_PATTERN)
    checkpoint_threshold: str | None = Field(default=None, pattern=SIZE_PATTERN)
