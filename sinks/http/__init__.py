"""The HTTP webhook sink: signed JSON batches of records POSTed to a receiver, each record with
a stable id, retried with backoff, acknowledged (offsets committed) only after a 2xx."""

from typing import TYPE_CHECKING

from cdc.support.lazy import exports

if TYPE_CHECKING:
    from sinks.http.config import HttpSinkConfig, RetryConfig
    from sinks.http.plugin import HttpSinkPlugin
    from sinks.http.sink import HttpSink

__all__ = ["HttpSink", "HttpSinkConfig", "HttpSinkPlugin", "RetryConfig"]

# Imported when first used: a command that only reads the pipeline's file needs the config, not
# the client library behind the rest (cdc.support.lazy).
__getattr__ = exports(
    __name__,
    {
        "HttpSink": "sinks.http.sink",
        "HttpSinkConfig": "sinks.http.config",
        "HttpSinkPlugin": "sinks.http.plugin",
        "RetryConfig": "sinks.http.config",
    },
)
