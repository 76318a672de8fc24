"""The Apache Iceberg sink (``type: iceberg``): the source's tables as Iceberg tables, written
through pyiceberg, with the consumed offsets in each commit's snapshot summary."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
    from sinks.iceberg.config import IcebergSinkConfig
    from sinks.iceberg.plugin import IcebergSinkPlugin
    from sinks.iceberg.reader import read_rows
    from sinks.iceberg.sink import IcebergSink

__all__ = ["IcebergSink", "IcebergSinkConfig", "IcebergSinkPlugin", "read_rows"]

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "IcebergSink": "sinks.iceberg.sink",
        "IcebergSinkConfig": "sinks.iceberg.config",
        "IcebergSinkPlugin": "sinks.iceberg.plugin",
        "read_rows": "sinks.iceberg.reader",
    },
)
