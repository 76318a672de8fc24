"""The metrics' parts on their own: the stall alarm, the probes, the endpoint, the observers.

The endpoint is a real HTTP server on a loopback port; no mocks. The e2e test
(tests/e2e/test_metrics_prometheus.py) runs all of it inside ``cdc run`` with a real Prometheus.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import orjson
import pytest
import structlog
from prometheus_client import generate_latest

from cdc.config.models import MetricsConfig, parse_listen
from cdc.contracts.errors import ConfigError
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.sink import SinkRecord
from cdc.log.base import Record
from cdc.metrics import Health, Metrics, MetricsServer, SinkObserver, SourceObserver
from cdc.metrics.lag import LagClock
from cdc.testing import ManualClock


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


@pytest.fixture
def health() -> Health:
    return Health(Metrics(), "p", stall_after_s=0.2, logger=structlog.get_logger())


def test_a_task_waiting_without_progress_is_stalled_once_then_cleared(health: Health) -> None:
    metrics = health._metrics
    health.opened("sink:a")
    health.waiting("sink:a", True)
    health.evaluate()
    assert _value(metrics, "cdc_task_stalled", pipeline="p", task="sink:a") == 0  # not yet
    time.sleep(0.25)
    with structlog.testing.capture_logs() as logs:
        health.evaluate()
        health.evaluate()  # logged once, not once per sample
    assert [e["event"] for e in logs] == ["task.stalled"]
    assert _value(metrics, "cdc_task_stalled", pipeline="p", task="sink:a") == 1
    ready, body = health.readiness()
    assert not ready and body["reasons"] == ["sink:a: stalled (no progress while work waits)"]
    health.progress("sink:a")  # progress clears it at once
    assert _value(metrics, "cdc_task_stalled", pipeline="p", task="sink:a") == 0
    assert health.readiness()[0]


@pytest.mark.parametrize("task", ["source", "sink:a"])
def test_a_one_sample_flip_of_waiting_neither_restarts_the_clock_nor_clears_a_stall(
    health: Health, task: str
) -> None:
    metrics = health._metrics
    health.opened(task)
    health.waiting(task, True)
    time.sleep(0.25)
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):  # the sample flaps; the task commits nothing
            health.waiting(task, False)
            health.evaluate()
            health.waiting(task, True)
            health.evaluate()
    assert [e["event"] for e in logs] == ["task.stalled"]
    assert _value(metrics, "cdc_task_stalled", pipeline="p", task=task) == 1
    with structlog.testing.capture_logs() as logs:
        health.waiting(task, False)  # nothing waits for two samples in a row: cleared
        health.evaluate()
        health.waiting(task, False)
        health.evaluate()
    assert [e["event"] for e in logs] == ["task.stall_cleared"]
    health.waiting(task, True)  # a new waiting period: the task has stall_after_s to take it
    health.evaluate()
    assert _value(metrics, "cdc_task_stalled", pipeline="p", task=task) == 0


def test_an_idle_task_with_nothing_waiting_is_never_stalled(health: Health) -> None:
    health.opened("source")
    time.sleep(0.25)
    health.evaluate()
    assert health.readiness() == (True, {"status": "ready", "reasons": []})


def test_readiness_names_tasks_not_open_retrying_or_stopped(health: Health) -> None:
    health.task("source")
    health.opened("sink:a")
    health.set_state("sink:a", "retrying", ConnectionError("redis is down"))
    health.opened("sink:b")
    health.set_state("sink:b", "stopped", ValueError("bad"))
    ready, body = health.readiness()
    assert not ready
    assert body["reasons"] == [
        "sink:a: retrying: redis is down",
        "sink:b: stopped: bad",
        "source: not open yet",
    ]
    metrics = health._metrics
    assert _value(metrics, "cdc_sink_state", pipeline="p", sink="b", state="stopped") == 1
    assert _value(metrics, "cdc_sink_state", pipeline="p", sink="b", state="running") == 0


def test_liveness_fails_when_a_task_thread_died() -> None:
    dead: list[str] = []
    health = Health(Metrics(), "p", 300, structlog.get_logger(), lambda: dead)
    assert health.liveness()[0]
    dead.append("source")
    assert health.liveness() == (False, {"status": "dead", "dead_tasks": ["source"]})


@pytest.fixture
def server(health: Health) -> Iterator[MetricsServer]:
    served = MetricsServer("127.0.0.1:0", health._metrics, health)
    yield served
    served.close()


def _get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read(), response.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["Content-Type"]


def test_the_endpoint_serves_metrics_and_both_probes(server: MetricsServer, health: Health) -> None:
    base = f"http://{server.address}"
    status, body, kind = _get(f"{base}/metrics")
    assert status == 200 and kind.startswith("text/plain")
    assert b"# TYPE cdc_source_events_total counter" in body
    assert b"_created" not in body
    assert _get(f"{base}/healthz")[0] == 200
    status, body, kind = _get(f"{base}/readyz")
    assert (status, kind) == (503, "application/json")
    assert orjson.loads(body)["reasons"] == ["no task has started"]
    health.opened("source")
    assert _get(f"{base}/readyz")[0] == 200
    assert _get(f"{base}/other")[0] == 404


def test_a_listen_address_is_host_and_port() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    for bad in ("9464", "localhost", "host:port", "h:70000", ":9464"):
        with pytest.raises(ValueError, match="host:port"):
            parse_listen(bad)
    with pytest.raises(ValueError, match="host:port"):
        MetricsConfig(listen="nowhere")
    assert MetricsConfig().listen is None  # off unless asked


def test_a_taken_port_is_a_clear_config_error(server: MetricsServer, health: Health) -> None:
    with pytest.raises(ConfigError, match="cannot listen on"):
        MetricsServer(server.address, health._metrics, health)


def _event(table: str, op: Op, ts_ms: int) -> ChangeEvent:
    source = SourceInfo("postgresql", "db", "public", table, ts_ms, 1)
    return ChangeEvent(op, {"id": 1}, None, {"id": 1}, source)


def test_the_source_observer_counts_a_batch_by_table_and_op(health: Health) -> None:
    metrics = health._metrics
    lag = LagClock()
    observer = SourceObserver(metrics, health, "p", lag)
    now_ms = int(time.time() * 1000)
    events = [_event("a", Op.CREATE, now_ms - 5000)] * 3 + [_event("b", Op.UPDATE, now_ms - 2000)]
    written = [Record("p.public.c", b"{}", b"{}")] * 2  # snapshot rows the source wrote itself
    records = [Record("p.public.a", b"{}", b"{}")] * 3 + [Record("p.public.b", b"{}", b"{}")]
    observer.appended(events, written, records + written)
    lag.appended(now_ms - 2000)  # what the source task does with the batch's last change
    assert _value(metrics, "cdc_source_events_total", pipeline="p", table="public.a", op="c") == 3
    assert _value(metrics, "cdc_source_events_total", pipeline="p", table="public.b", op="u") == 1
    assert _value(metrics, "cdc_source_events_total", pipeline="p", table="public.c", op="r") == 2
    assert _value(metrics, "cdc_snapshot_rows_total", pipeline="p", table="public.c") == 2
    assert _value(metrics, "cdc_log_records_total", pipeline="p", topic="p.public.a") == 3
    seconds = _value(metrics, "cdc_source_lag_seconds", pipeline="p")
    assert seconds is not None and 1.9 < seconds < 3.0  # the last appended change's commit


def test_the_source_observer_counts_written_changes_by_their_operation(health: Health) -> None:
    """Changes a source wrote as records (a stream's: SourceBatch.record_ops), a tombstone
    not counted; without operations, written records are snapshot rows."""
    metrics = health._metrics
    observer = SourceObserver(metrics, health, "q", LagClock())
    written = [Record("q.public.a", b"{}", b"{}")] * 3 + [Record("q.public.a", b"{}", None)]
    observer.appended([], written, written, ["c", "u", "d", ""])
    assert _value(metrics, "cdc_source_events_total", pipeline="q", table="public.a", op="c") == 1
    assert _value(metrics, "cdc_source_events_total", pipeline="q", table="public.a", op="u") == 1
    assert _value(metrics, "cdc_source_events_total", pipeline="q", table="public.a", op="d") == 1
    assert (
        _value(metrics, "cdc_source_events_total", pipeline="q", table="public.a", op="r") is None
    )
    assert _value(metrics, "cdc_snapshot_rows_total", pipeline="q", table="public.a") is None
    assert _value(metrics, "cdc_log_records_total", pipeline="q", topic="q.public.a") == 4


def test_the_lag_grows_while_stuck_and_is_0_after_a_second_with_nothing_to_read() -> None:
    idle_clock = ManualClock()
    lag = LagClock(idle_clock)
    assert lag.seconds() == 0.0  # nothing appended yet
    lag.appended(int(time.time() * 1000) - 3000)
    first = lag.seconds()
    time.sleep(0.2)
    assert 2.9 < first < lag.seconds()  # read when asked: it grows until the next change
    lag.idle()  # one empty poll: a gap in a backlog, not caught up
    assert lag.seconds() > 3.0
    idle_clock.advance(0.99)
    lag.idle()  # still within the second
    assert lag.seconds() > 3.0
    idle_clock.advance(0.01)
    lag.idle()
    assert lag.seconds() == 0.0
    lag.appended(int(time.time() * 1000) - 500)  # new changes: behind again
    assert lag.seconds() > 0.4


def test_the_sink_observer_counts_its_tables_and_observes_latency(health: Health) -> None:
    metrics = health._metrics
    observer = SinkObserver(metrics, health, "p", "cache", ["p.public.a"])
    observer.opened()
    now_ms = int(time.time() * 1000)
    value = {"op": "c", "source": {"ts_ms": now_ms - 1500}}
    batch = [
        SinkRecord("p.public.a", 0, 0, {"id": 1}, value),
        SinkRecord("p.public.a", 0, 1, {"id": 1}, None),  # a tombstone
        SinkRecord("p.__schemas", 0, 0, {"k": 1}, {"schema": "x"}),  # not one of its tables
    ]
    observer.applied(batch)
    applied = "cdc_sink_applied_total"
    assert _value(metrics, applied, pipeline="p", sink="cache", table="public.a", op="c") == 1
    assert (
        _value(metrics, applied, pipeline="p", sink="cache", table="public.a", op="tombstone") == 1
    )
    assert b'table="__schemas"' not in generate_latest(metrics.registry)
    count = _value(metrics, "cdc_end_to_end_latency_seconds_count", pipeline="p", sink="cache")
    total = _value(metrics, "cdc_end_to_end_latency_seconds_sum", pipeline="p", sink="cache")
    assert count == 1 and total is not None and 1.4 < total < 3.0
