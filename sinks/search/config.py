"""The ``search`` sink's section of a pipeline file, and where it puts each table's index."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from cdc.config.models import SinkConfig


class SearchSinkConfig(SinkConfig):
    """``type: search``.

    Attributes:
        path: directory of the indexes, one ``<schema>.<table>`` directory each.
        writer_heap_mb: indexing memory of each table's writer.
    """

    type: Literal["search"] = "search"
    path: str
    writer_heap_mb: int = Field(default=64, ge=16, le=4096)


def table_dir(config: SearchSinkConfig, schema: str, table: str) -> Path:
    return Path(config.path) / f"{schema}.{table}"
