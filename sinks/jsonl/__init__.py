"""A sink that appends every record to one JSON-lines file per topic, exactly once."""

from sinks.jsonl.config import JsonlSinkConfig
from sinks.jsonl.plugin import JsonlSinkPlugin
from sinks.jsonl.sink import JsonlSink

__all__ = ["JsonlSink", "JsonlSinkConfig", "JsonlSinkPlugin"]
