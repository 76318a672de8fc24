"""The ``sqlite`` sink's section of a pipeline file.

The model extends :class:`cdc.config.models.SinkConfig` (``name``, ``type``, ``tables``,
``batch_records``, ``batch_bytes``): ``cdc validate`` checks a sink's section against its
plugin's ``config_model`` and reports every error with its YAML path
(``sinks[0].path: ...``), exit 2, before anything runs.
"""

from __future__ import annotations

from typing import Literal

from cdc.config.models import SinkConfig
from pydantic import Field, field_validator


class SqliteSinkConfig(SinkConfig):
    """A SQLite database file.

    Attributes:
        path: the database file; its directory is created if missing. One table per source
            table, named ``"<schema>.<table>"``, and the sink's own ``_cdc_offsets`` and
            ``_cdc_tables``.
        busy_timeout_s: how long a statement waits for another connection's lock (a reader
            such as ``cdc verify`` holds one only briefly in WAL mode) before the batch is
            retried with backoff.
    """

    type: Literal["sqlite"] = "sqlite"
    path: str = Field(min_length=1)
    busy_timeout_s: float = Field(default=5.0, gt=0, le=600)

    @field_validator("path")
    @classmethod
    def _a_file(cls, value: str) -> str:
        # The consumed offsets live in the database: one that vanishes with the process would
        # make every restart read the topics again into an empty store.
        if value == ":memory:" or value.startswith("file:") or "\0" in value:
            raise ValueError(
                "must be a database file path (an in-memory or URI database would lose the "
                "offsets the sink keeps with its data)"
            )
        return value
