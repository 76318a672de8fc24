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
from cdc.metrics.views import ViewLagSampler, ViewObserver
from cdc.support.logging import Logger

__all__ = [
    "Health",
    "Metrics",
    "MetricsServer",
    "SinkObserver",
    "SourceObserver",
    "Telemetry",
    "ViewObserver",
]

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

    def view(self, name: str) -> ViewObserver:
        """The observer of live join view ``name``."""
        return ViewObserver(self.metrics, self.pipeline, name)

    def sample_views(
        self, log: Log, views: Mapping[str, tuple[str, Sequence[str]]], interval_s: float
    ) -> None:
        """Sample ``views``' lag (``{name: (consumer group, topics)}``) in a thread."""
        sampler = ViewLagSampler(self.metrics, self.pipeline, log, views, interval_s, self._logger)
        self._start(sampler.run, "metrics-views")

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
        self._probes.append(probe)
        self._start(sampler.run, "metrics-sampler")
        return sampler

    def _start(self, run: Callable[[threading.Event], None], name: str) -> None:
        thread = threading.Thread(target=run, args=(self._stop,), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5.0)
        for probe in self._probes:
            close = getattr(probe, "close", None)
            if close is not None:
                close()  # its side connection
        self.server.close()
