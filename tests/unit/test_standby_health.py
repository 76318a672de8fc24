"""A standby worker of a single-writer sink (:mod:`cdc.runtime.standby`) in the metrics: its own
``cdc_sink_state`` series, ready on ``/readyz`` and never stalled by the leader's lag."""

from __future__ import annotations

import time

import structlog

from cdc.metrics import Health, Metrics


def test_a_standby_is_its_own_state_ready_and_never_stalled() -> None:
    metrics = Metrics()
    health = Health(metrics, "p", stall_after_s=0.1, logger=structlog.get_logger())
    health.set_state("sink:w", "standby")
    health.waiting("sink:w", True)  # the group lags: the leader's work, not the standby's
    time.sleep(0.15)
    with structlog.testing.capture_logs() as logs:
        health.evaluate()
    assert logs == []
    assert health.readiness() == (True, {"status": "ready", "reasons": []})

    def state(name: str) -> float | None:
        labels = {"pipeline": "p", "sink": "w", "state": name}
        return metrics.registry.get_sample_value("cdc_sink_state", labels)

    assert (state("standby"), state("running")) == (1, 0)
    health.opened("sink:w")  # it took over: running, and its lag is its own again
    assert (state("standby"), state("running")) == (0, 1)
    time.sleep(0.15)
    health.evaluate()
    assert health.readiness()[1]["reasons"] == ["sink:w: stalled (no progress while work waits)"]
