"""The ``duckdb`` sink's section of a pipeline file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cdc.config import SinkConfig


class DuckDBSinkConfig(SinkConfig):
    """A DuckDB warehouse file.

    Attributes:
        path: the database file; its directory is created if missing.
        mode: ``current`` keeps the current state of each table; ``history`` also keeps every
            version in ``<table>__history`` (slowly changing dimension, type 2).
        threads: DuckDB worker threads (default: DuckDB's, one per core).
        memory_limit: DuckDB's memory limit, e.g. ``"2GB"`` (default: DuckDB's).
    """

    type: Literal["duckdb"] = "duckdb"
    path: str = Field(min_length=1)
    mode: Literal["current", "history"] = "current"
    threads: int | None = Field(default=None, ge=1)
    memory_limit: str | None = None
