"""The HTTP webhook sink: signed JSON batches of records POSTed to a receiver, each record with
a stable id, retried with backoff, acknowledged (offsets committed) only after a 2xx."""

from sinks.http.config import HttpSinkConfig, RetryConfig
from sinks.http.plugin import HttpSinkPlugin
from sinks.http.sink import HttpSink

__all__ = ["HttpSink", "HttpSinkConfig", "HttpSinkPlugin", "RetryConfig"]
