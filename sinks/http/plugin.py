"""Entry point ``http`` of ``cdc.sinks``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc.support import lazy
from sinks.http.config import HttpSinkConfig

# What writes to the store is imported by the method that needs it: a command that only reads
# the pipeline's file loads the config, not the store's client library.
if TYPE_CHECKING:
    from cdc.contracts.sink import SinkContext
    from sinks.http.sink import HttpSink


class HttpSinkPlugin:
    """Builds :class:`HttpSink`.

    No ``read_rows``: a webhook cannot be read back, so ``cdc verify`` reports this sink's
    tables NOT VERIFIABLE (as it does jsonl's); the receiver is the one to compare.
    """

    config_model = HttpSinkConfig
    # Its client library, imported when the sink runs: checked at load (cdc.contracts.plugins).
    requires = ("httpx",)

    @staticmethod
    def create(config: HttpSinkConfig, context: SinkContext) -> HttpSink:
        from sinks.http.sink import HttpSink

        return HttpSink(config, context)

    # cdc doctor: a signed empty batch is answered 2xx
    doctor = lazy.Attribute("sinks.http.doctor", "doctor")
