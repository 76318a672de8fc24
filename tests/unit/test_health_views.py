"""A live join view in the pipeline's health: the task ``view:<name>`` in ``/readyz`` and the
stall alarm.

Health and the sampler on their own (the view's lag as ``cdc_view_lag_records`` holds it; a
one-sample flip of it neither restarts the stall clock nor clears the stall), then
a real view task on a real embedded log (SQLite, in process) whose local store another
connection holds locked: it retries, is flagged stalled while its tables' records wait, and
clears once the lock is gone. The same through ``cdc run`` on PostgreSQL:
tests/e2e/test_views_readyz.py.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
import structlog

from cdc.config.pipeline import Pipeline, parse
from cdc.log.embedded.log import EmbeddedLog
from cdc.metrics import Health, Metrics
from cdc.metrics.sampler import Sampler
from cdc.metrics.views import ViewLagSampler
from cdc.support.logging import get_logger
from cdc.support.retry import Decision, classify
from cdc.support.wait import wait_until
from cdc.views.health import ViewHealth, view_task
from cdc.views.progress import input_topics
from cdc.views.store import ViewStoreLocked, lock_retriable
from cdc.views.task import ViewTask
from tests.unit.test_views_task import FILE, change, documents, log  # noqa: F401 (fixture)

TASK = "view:order_docs"
STALLED = f"{TASK}: stalled (no progress while work waits)"


def _stalled(metrics: Metrics, task: str = TASK) -> float | None:
    return metrics.registry.get_sample_value("cdc_task_stalled", {"pipeline": "shop", "task": task})


@pytest.fixture
def health() -> Health:
    return Health(Metrics(), "shop", stall_after_s=0.2, logger=structlog.get_logger())


def test_a_view_not_yet_serving_fails_readiness_then_is_ready(health: Health) -> None:
    view = ViewHealth(health, "order_docs")
    assert view_task("order_docs") == TASK
    assert health.readiness() == (
        False,
        {"status": "not ready", "reasons": [f"{TASK}: not open yet"]},
    )
    view.retrying(ConnectionError("log is down"))  # before its first session opened: says why
    assert health.readiness()[1]["reasons"] == [f"{TASK}: not open yet: retrying: log is down"]
    view.serving()
    assert health.readiness() == (True, {"status": "ready", "reasons": []})
    view.retrying(ConnectionError("store is locked"))
    assert health.readiness()[1]["reasons"] == [f"{TASK}: retrying: store is locked"]
    # An empty poll while records wait proves nothing (on Kafka a new session's first polls
    # are empty while its consumer joins the group): still retrying.
    health.waiting(TASK, True)
    view.caught_up()
    assert health.readiness()[1]["reasons"] == [f"{TASK}: retrying: store is locked"]
    health.waiting(TASK, False)
    view.caught_up()  # a poll found nothing and nothing waits: the session works again
    assert health.readiness()[0]
    view.stopped(ValueError("bad on column"))
    assert health.readiness()[1]["reasons"] == [f"{TASK}: stopped: bad on column"]
    # No sink series for a view's states: cdc_sink_state is the sinks' alone.
    assert not [s for f in health._metrics.sink_state.collect() for s in f.samples]


def test_a_view_waiting_without_progress_is_stalled_once_then_cleared(health: Health) -> None:
    metrics = health._metrics
    view = ViewHealth(health, "order_docs")
    view.serving()
    health.waiting(TASK, True)
    health.evaluate()
    assert _stalled(metrics) == 0  # not yet
    time.sleep(0.25)
    with structlog.testing.capture_logs() as logs:
        health.evaluate()
        health.evaluate()  # logged once, not once per sample
    assert [(e["event"], e["task"]) for e in logs] == [("task.stalled", TASK)]
    assert _stalled(metrics) == 1
    assert health.readiness()[1]["reasons"] == [STALLED]
    view.serving()  # a new session after a retry is no progress: still stalled
    health.evaluate()
    assert _stalled(metrics) == 1
    with structlog.testing.capture_logs() as logs:
        view.committed()  # a batch committed: cleared at once
    assert [e["event"] for e in logs] == ["task.stall_cleared"]
    assert _stalled(metrics) == 0 and health.readiness()[0]


def test_work_arriving_after_a_long_idle_is_not_a_stall(health: Health) -> None:
    view = ViewHealth(health, "order_docs")
    view.serving()
    time.sleep(0.25)  # idle for longer than stall_after_s, nothing waiting
    health.waiting(TASK, True)  # records arrive: the view has stall_after_s to take them
    health.evaluate()
    assert _stalled(health._metrics) == 0 and health.readiness()[0]
    time.sleep(0.25)
    health.evaluate()  # it did not: now it is stalled
    assert _stalled(health._metrics) == 1


def test_a_one_sample_flip_of_waiting_neither_restarts_the_stall_clock_nor_clears_it(
    health: Health,
) -> None:
    metrics = health._metrics
    view = ViewHealth(health, "order_docs")
    view.serving()
    health.waiting(TASK, True)
    health.evaluate()
    assert _stalled(metrics) == 0
    time.sleep(0.25)  # stuck: nothing committed for longer than stall_after_s
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):  # its lag sample flaps: one sample sees nothing waiting, then again
            health.waiting(TASK, False)
            health.evaluate()
            health.waiting(TASK, True)  # formerly a new waiting period: the clock restarted
            health.evaluate()
            assert _stalled(metrics) == 1
            assert health.readiness()[1]["reasons"] == [STALLED]
    assert [e["event"] for e in logs] == ["task.stalled"]  # once: no clearing at each flip
    with structlog.testing.capture_logs() as logs:
        view.committed()  # real progress: cleared at once, the clock from here
    assert [e["event"] for e in logs] == ["task.stall_cleared"]
    health.evaluate()  # records still wait: the view has stall_after_s again
    assert _stalled(metrics) == 0 and health.readiness()[0]
    time.sleep(0.25)
    health.waiting(TASK, False)  # a flip after the commit does not restart it either
    health.waiting(TASK, True)
    health.evaluate()
    assert _stalled(metrics) == 1


def test_two_samples_with_nothing_waiting_end_the_waiting_period(health: Health) -> None:
    view = ViewHealth(health, "order_docs")
    view.serving()
    health.waiting(TASK, True)  # a waiting sample, then nothing waits for two samples in a row
    health.waiting(TASK, False)
    assert health.task(TASK).waiting  # one sample is a flip
    health.waiting(TASK, False)
    assert not health.task(TASK).waiting
    time.sleep(0.25)  # idle for longer than stall_after_s, nothing waiting
    health.waiting(TASK, True)  # a new waiting period: the view has stall_after_s to take it
    health.evaluate()
    assert _stalled(health._metrics) == 0 and health.readiness()[0]
    time.sleep(0.25)
    health.evaluate()
    assert _stalled(health._metrics) == 1
    health.waiting(TASK, False)
    health.evaluate()  # one sample with nothing waiting: still stalled
    assert _stalled(health._metrics) == 1
    health.waiting(TASK, False)
    health.evaluate()  # settled: nothing waits any more, cleared
    assert _stalled(health._metrics) == 0 and health.readiness()[0]


def test_a_long_store_rebuild_is_progress(health: Health) -> None:
    view = ViewHealth(health, "order_docs")
    health.waiting(TASK, True)  # its tables wait while it rebuilds its store before it opens
    time.sleep(0.25)
    view.rebuilding()  # a piece of the state topic went into the store
    health.evaluate()
    assert _stalled(health._metrics) == 0
    assert health.readiness()[1]["reasons"] == [f"{TASK}: not open yet"]
    time.sleep(0.25)
    health.evaluate()  # no piece for stall_after_s: stalled
    assert _stalled(health._metrics) == 1


def test_the_sampler_marks_a_view_waiting_from_its_lag(
    log: EmbeddedLog,  # noqa: F811 (the fixture)
) -> None:
    pipeline = parse(FILE + f"log: {{type: embedded, path: '{log.path}'}}\n", {})
    metrics = Metrics()
    health = Health(metrics, "shop", 60.0, get_logger())
    ViewHealth(health, "order_docs").serving()
    lags = _lag_sampler(metrics, pipeline, log)
    sampler = Sampler(metrics, health, "shop", log, None, {}, 1.0, get_logger())
    lags.sample()
    sampler.sample()
    assert not health.task(TASK).waiting  # nothing in its tables
    with log.begin() as tx:
        tx.append([change("orders", {"id": 1, "customer_id": 1}, 10)])
    lags.sample()
    sampler.sample()
    assert health.task(TASK).waiting
    # Another pipeline's view in the same registry is not this pipeline's task.
    metrics.view_lag.labels("other", "order_docs").set(5)
    sampler.sample()
    assert set(health._tasks) == {TASK}


def _lag_sampler(metrics: Metrics, pipeline: Pipeline, opened: EmbeddedLog) -> ViewLagSampler:
    topics = input_topics(pipeline, pipeline.views[0])
    inputs = {"order_docs": ("shop.view.order_docs", topics)}
    return ViewLagSampler(metrics, "shop", opened, inputs, 0.1, get_logger())


def test_only_a_lock_on_the_store_is_retriable(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    holder, other = sqlite3.connect(path), sqlite3.connect(path, timeout=0)
    with closing(holder), closing(other):
        holder.execute("BEGIN IMMEDIATE")
        locked = pytest.raises(ViewStoreLocked, match="database is locked")
        with locked as caught, lock_retriable(path):
            other.execute("CREATE TABLE t (x)")
        assert classify(caught.value) is Decision.RETRY
        holder.rollback()
        missing = pytest.raises(sqlite3.OperationalError, match="no such table")
        with missing, lock_retriable(path):  # any other error stays fatal, unchanged
            other.execute("SELECT * FROM missing")


@pytest.fixture
def running(log: EmbeddedLog) -> Iterator[tuple[ViewTask, Health, Sampler]]:  # noqa: F811
    """A view task serving, with its lag and health sampled as ``cdc run`` samples them."""
    pipeline = parse(FILE + f"log: {{type: embedded, path: '{log.path}'}}\n", {})
    metrics = Metrics()
    health = Health(metrics, "shop", 0.5, get_logger())
    stop = threading.Event()
    task = ViewTask(
        pipeline, pipeline.views[0], 0, log, stop, get_logger(), poll_timeout_s=0.05,
        store_dir=log.path / "views", health=ViewHealth(health, "order_docs"),
    )  # fmt: skip
    lags = _lag_sampler(metrics, pipeline, log)
    sampler = Sampler(metrics, health, "shop", log, None, {}, 0.1, get_logger())
    threads = [
        threading.Thread(target=task.serve, daemon=True),
        threading.Thread(target=lags.run, args=(stop,), daemon=True),
        threading.Thread(target=sampler.run, args=(stop,), daemon=True),
    ]
    for thread in threads:
        thread.start()
    try:
        yield task, health, sampler
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)


def test_a_view_whose_store_is_locked_retries_stalls_and_clears(
    log: EmbeddedLog,  # noqa: F811 (the fixture)
    running: tuple[ViewTask, Health, Sampler],
) -> None:
    task, health, _ = running
    metrics = health._metrics
    with log.begin() as tx:
        tx.append([change("customers", {"id": 1, "name": "A"}, 10)])
        tx.append([change("orders", {"id": 1, "customer_id": 1}, 11)])
    wait_until(lambda: len(documents(log)) == 1 and health.readiness()[0], 15)

    # Another process's lock, as a sqlite3 shell's open write transaction holds it.
    with closing(sqlite3.connect(log.path / "views" / "order_docs.sqlite")) as holder:
        holder.execute("BEGIN IMMEDIATE")
        with log.begin() as tx:
            tx.append([change("orders", {"id": 2, "customer_id": 1}, 12)])
        # The batch's first write meets the lock ("database is locked"): the session is retried.
        wait_until(lambda: health.task(TASK).state == "retrying", 30)
        wait_until(lambda: _stalled(metrics) == 1, 30)
        ready, body = health.readiness()
        assert not ready and STALLED in body["reasons"], body
        assert any(r.startswith(f"{TASK}: retrying: view store ") for r in body["reasons"])
        assert "locked" in (health.task(TASK).error or "")
        assert len(documents(log)) == 1  # nothing went past the lock
        holder.rollback()

    wait_until(lambda: len(documents(log)) == 2, 30)
    wait_until(lambda: _stalled(metrics) == 0 and health.readiness()[0], 30)
    assert task.documents_written >= 2
