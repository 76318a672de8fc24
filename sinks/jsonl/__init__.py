"""The JSON-lines sink: every record appended to one file per topic, exactly once (files cut back
to the lengths its state file recorded), optionally unwrapped to flat rows."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
    from sinks.jsonl.config import JsonlSinkConfig
    from sinks.jsonl.plugin import JsonlSinkPlugin
    from sinks.jsonl.sink import JsonlSink

__all__ = ["JsonlSink", "JsonlSinkConfig", "JsonlSinkPlugin"]

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "JsonlSink": "sinks.jsonl.sink",
        "JsonlSinkConfig": "sinks.jsonl.config",
        "JsonlSinkPlugin": "sinks.jsonl.plugin",
    },
)
