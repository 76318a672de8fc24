"""An example third-party sink: the current rows of every table in a SQLite file, exactly once.

Installed, it is found through its ``cdc.sinks`` entry point ``sqlite`` (``type: sqlite`` in a
pipeline file). ``docs/sinks/writing-a-sink.md`` of cdc-connectors walks through it.
"""

from cdc_sink_sqlite.config import SqliteSinkConfig
from cdc_sink_sqlite.plugin import SqliteSinkPlugin
from cdc_sink_sqlite.sink import SqliteSink

__all__ = ["SqliteSink", "SqliteSinkConfig", "SqliteSinkPlugin"]
