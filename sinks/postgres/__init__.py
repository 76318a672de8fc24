"""The PostgreSQL sink (``type: postgres``): the source's tables, typed, kept current (optionally
with history) in a PostgreSQL database, merged by position, offsets in the same transaction."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
    from sinks.postgres.config import PostgresSinkConfig
    from sinks.postgres.plugin import PostgresSinkPlugin
    from sinks.postgres.reader import read_rows
    from sinks.postgres.sink import PostgresSink

__all__ = ["PostgresSink", "PostgresSinkConfig", "PostgresSinkPlugin", "read_rows"]

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "PostgresSink": "sinks.postgres.sink",
        "PostgresSinkConfig": "sinks.postgres.config",
        "PostgresSinkPlugin": "sinks.postgres.plugin",
        "read_rows": "sinks.postgres.reader",
    },
)
