"""The Apache Iceberg sink (``type: iceberg``): the source's tables as Iceberg tables, written
through pyiceberg, with the consumed offsets in each commit's snapshot summary."""

from sinks.iceberg.config import IcebergSinkConfig
from sinks.iceberg.plugin import IcebergSinkPlugin
from sinks.iceberg.reader import read_rows
from sinks.iceberg.sink import IcebergSink

__all__ = ["IcebergSink", "IcebergSinkConfig", "IcebergSinkPlugin", "read_rows"]
