"""Prometheus metrics, health probes and the stall alarm of a running pipeline, its lag clock,
and the snapshot progress it reports and displays.

:class:`Telemetry` bundles them for one process: the metrics (:mod:`cdc.metrics.registry`),
the tasks' health (:mod:`cdc.metrics.health`), the sampler thread
(:mod:`cdc.metrics.sampler`) and the HTTP endpoint (:mod:`cdc.metrics.server`). The tasks
get observers (:mod:`cdc.metrics.observers`), or ``None`` when metrics are off.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from cdc.log.base import Log
from cdc.metrics.health import Health
from cdc.metrics.lag import LagClock
from cdc.metrics.observers import SinkObserver, SourceObserver
from cdc.metrics.registry import Metrics
from cdc.metrics.sampler import Sampler, SourceProbe
from cdc.metrics.server import MetricsServer
from cdc.support.logging import Logger

__all__ = ["Health", "Metrics", "MetricsServer", "SinkObserver", "SourceObserver", "Telemetry"]

#: The longest interval between two samples; shorter when ``stall_after_s`` is short.
SAMPLE_INTERVAL_S = 10.0


class Telemetry:
    """One process's metrics and probes, served on ``listen`` until :meth:`close`."""

    def __init__(
        self,
        pipeline: str,
        listen: str,
        stall_after_s: float,
        logger: Logger,
        dead_tasks: Callable[[], list[str]],
    ) -> None:
        self.pipeline = pipeline
        self.metrics = Metrics()
        self.health = Health(self.metrics, pipeline, stall_after_s, logger, dead_tasks)
        self._stall_after_s = stall_after_s
        self._logger = logger
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._probes: list[SourceProbe | None] = []
        self.server = MetricsServer(listen, self.metrics, self.health)
        logger.info("metrics.listening", address=self.server.address)

    def source(self, lag: LagClock) -> SourceObserver:
        """The source task's observer; ``cdc_source_lag_seconds`` reads ``lag``."""
        return SourceObserver(self.metrics, self.health, self.pipeline, lag)

    def sink(self, name: str, topics: Sequence[str]) -> SinkObserver:
        """The observer of sink ``name``, which applies ``topics``."""
        return SinkObserver(self.metrics, self.health, self.pipeline, name, topics)

    def sample(
        self,
        log: Log,
        probe: SourceProbe | None,
        sinks: Mapping[str, tuple[str, Sequence[str]]],
    ) -> Sampler:
        """Start sampling ``log``, the source's ``probe`` and ``sinks``' lag in a thread."""
        interval = min(SAMPLE_INTERVAL_S, max(0.2, self._stall_after_s / 5))
        sampler = Sampler(
            self.metrics, self.health, self.pipeline, log, probe, sinks, interval, self._logger
        )
        thread = threading.Thread(
            target=sampler.run, args=(self._stop,), name="metrics-sampler", daemon=True
        )
        self._threads.append(thread)
        self._probes.append(probe)
        thread.start()
        return sampler

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5.0)
        for probe in self._probes:
            close = getattr(probe, "close", None)
            if close is not None:
                close()  # its side connection
        self.server.close()
