"""What a live join view (:mod:`cdc.views`) tells the metrics: the records it read and the
documents it wrote once per committed batch, and its lag, sampled in a thread of its own.

The lag is read on the sampler's own connections as ``cdc status`` reads it
(:func:`cdc.views.progress.behind`): in a thread, not in the view task, so a view stuck
retrying a session still shows its lag growing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from cdc.log.base import Log
from cdc.metrics.registry import Metrics
from cdc.support.logging import Logger
from cdc.support.redact import redact
from cdc.views.progress import behind, records_behind


class ViewObserver:
    """One view's counters and position; every series exists at 0 from the start, so a
    ``rate()`` or ``increase()`` over a view that wrote nothing yet is 0, not absent."""

    def __init__(self, metrics: Metrics, pipeline: str, view: str) -> None:
        self._records = metrics.view_records.labels(pipeline, view)
        self._documents = metrics.view_documents.labels(pipeline, view)
        self._position = metrics.view_position.labels(pipeline, view)

    def committed(self, records: int, documents: int, high: Any) -> None:
        """A batch of ``records`` committed with ``documents``; ``high`` the view's high-water
        position (``[position, index]``, ``None`` before any)."""
        self._records.inc(records)
        self._documents.inc(documents)
        if high:
            with contextlib.suppress(TypeError, ValueError):  # a resume token is no number
                self._position.set(int(high[0]))


class ViewLagSampler:
    """Sets ``cdc_view_lag_records`` of each view every ``interval_s`` until ``stop`` is set.

    Args:
        views: ``{view name: (its consumer group, its tables' topics)}``.
    """

    def __init__(
        self,
        metrics: Metrics,
        pipeline: str,
        log: Log,
        views: Mapping[str, tuple[str, Sequence[str]]],
        interval_s: float,
        logger: Logger,
    ) -> None:
        self._gauges = {name: metrics.view_lag.labels(pipeline, name) for name in views}
        self._log = log
        self._views = views
        self._interval_s = interval_s
        self._logger = logger
        self._failing = False

    def run(self, stop: threading.Event) -> None:
        self.sample()
        while not stop.wait(self._interval_s):
            self.sample()

    def sample(self) -> None:
        """One reading of every view's lag; a failed read is logged (once in a row) and the
        gauges keep their values: a metric never stops a pipeline."""
        try:
            for name, (group, topics) in self._views.items():
                self._gauges[name].set(records_behind(behind(self._log, group, topics)))
        except Exception as exc:
            if not self._failing:
                self._logger.warning("metrics.sample_failed", part="views", error=redact(str(exc)))
            self._failing = True
        else:
            self._failing = False
