"""A sink that appends every record to one JSON-lines file per topic, exactly once."""

from sinks.jsonl.sink import JsonlSink, JsonlSinkConfig, JsonlSinkPlugin

__all__ = ["JsonlSink", "JsonlSinkConfig", "JsonlSinkPlugin"]
