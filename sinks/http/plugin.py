"""Entry point ``http`` of ``cdc.sinks``."""

from __future__ import annotations

from cdc.contracts.sink import SinkContext
from sinks.http import doctor as preflight
from sinks.http.config import HttpSinkConfig
from sinks.http.sink import HttpSink


class HttpSinkPlugin:
    """Builds :class:`HttpSink`.

    No ``read_rows``: a webhook cannot be read back, so ``cdc verify`` reports this sink's
    tables NOT VERIFIABLE (as it does jsonl's); the receiver is the one to compare.
    """

    config_model = HttpSinkConfig

    @staticmethod
    def create(config: HttpSinkConfig, context: SinkContext) -> HttpSink:
        return HttpSink(config, context)

    doctor = staticmethod(preflight.doctor)  # cdc doctor: a signed empty batch is answered 2xx
