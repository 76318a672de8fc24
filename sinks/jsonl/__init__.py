"""The JSON-lines sink: every record appended to one file per topic, exactly once (files cut back
to the lengths its state file recorded), optionally unwrapped to flat rows."""

from sinks.jsonl.config import JsonlSinkConfig
from sinks.jsonl.plugin import JsonlSinkPlugin
from sinks.jsonl.sink import JsonlSink

__all__ = ["JsonlSink", "JsonlSinkConfig", "JsonlSinkPlugin"]
