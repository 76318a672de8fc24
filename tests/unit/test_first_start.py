"""What a pipeline's first start checks: how long it waits for an unreachable source, and that
a sink which cannot start stops it before the source runs.

The source and sinks are fakes here (the behaviour under test is the runtime's own, on the real
embedded log); tests/e2e/test_pg_first_start.py runs the same cases against PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.errors import SinkFatal, SinkUnavailable, SourceFatal, SourceUnavailable
from cdc.contracts.source import SourceBatch
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.preflight import SinkCannotStart, check_sinks, is_first_start
from cdc.runtime.source_task import SourceTask
from cdc.support.logging import get_logger
from cdc.testing import wait_until


class Unreachable:
    """A source whose server does not answer while ``up`` is false; once opened, its first poll
    loses the connection and the server stays away."""

    def __init__(self, attempts: list[float], up: bool = False) -> None:
        self.attempts = attempts
        self.up = up

    def tables(self) -> list[tuple[str, str]]:
        return [("public", "items")]

    def open(self, stored_offsets: Mapping[str, Any]) -> None:
        self.attempts.append(time.monotonic())
        if not self.up:
            raise SourceUnavailable("PostgreSQL at postgresql://u@h/db is unreachable: refused")

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        self.up = False
        raise SourceUnavailable("lost the replication connection")

    def ack(self, offsets: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def log(tmp_path: Path) -> Any:
    log = EmbeddedLog(tmp_path / "log", partitions=1)
    yield log
    log.close()


def _task(
    log: EmbeddedLog, source: Unreachable, stop: threading.Event, timeout: float
) -> SourceTask:
    return SourceTask(
        "p", log, lambda: source, stop, get_logger(), poll_timeout_s=0.05,
        first_start_timeout_s=timeout,
    )  # fmt: skip


def _run_in_thread(task: SourceTask) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            task.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    return thread, errors


def test_a_first_start_gives_up_on_an_unreachable_source_after_the_timeout(
    log: EmbeddedLog,
) -> None:
    attempts: list[float] = []
    started = time.monotonic()
    task = _task(log, Unreachable(attempts), threading.Event(), timeout=0.6)
    with pytest.raises(SourceFatal, match=r"unreachable.*gave up after 0\.6 s") as raised:
        task.run()
    assert isinstance(raised.value.__cause__, SourceUnavailable)
    assert len(attempts) >= 2, "it retried within the bound"
    assert attempts[-1] - started >= 0.5  # the bound, not the first failure, ended it


def test_a_pipeline_with_stored_offsets_retries_past_the_timeout(log: EmbeddedLog) -> None:
    tx = log.begin()
    tx.store_offsets({"postgres": {"lsn": 100}})
    tx.commit()
    attempts: list[float] = []
    stop = threading.Event()
    started = time.monotonic()
    thread, errors = _run_in_thread(_task(log, Unreachable(attempts), stop, timeout=0.3))
    try:
        wait_until(
            lambda: (bool(attempts) and attempts[-1] - started > 1.5) or bool(errors), 20, 0.02
        )
    finally:
        stop.set()
        thread.join(15)
    assert not errors and not thread.is_alive()


def test_a_source_that_opened_once_is_retried_past_the_timeout(log: EmbeddedLog) -> None:
    # Opened, lost at once, then unreachable: it has run in this process, so the outage is sat
    # out even though nothing was stored yet.
    attempts: list[float] = []
    stop = threading.Event()
    thread, errors = _run_in_thread(_task(log, Unreachable(attempts, up=True), stop, 0.3))
    try:
        wait_until(
            lambda: (len(attempts) >= 2 and attempts[-1] - attempts[0] > 1.5) or bool(errors),
            20,
            0.02,
        )
    finally:
        stop.set()
        thread.join(15)
    assert not errors and not thread.is_alive()


class FakeSink:
    """A sink whose ``open`` raises ``error`` (or succeeds when None)."""

    def __init__(self, error: Exception | None, closed: list[str], name: str) -> None:
        self.error, self.closed, self.name = error, closed, name

    def open(self) -> None:
        if self.error is not None:
            raise self.error

    def stored_offsets(self) -> None:
        return None

    def write(self, records: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed.append(self.name)


def _factories(errors: dict[str, Exception | None], closed: list[str]) -> dict[str, Any]:
    return {
        name: (lambda n=name, e=error: FakeSink(e, closed, n)) for name, error in errors.items()
    }


def test_a_sink_that_cannot_start_is_named_and_every_opened_sink_closed() -> None:
    closed: list[str] = []
    errors = {"cache": None, "warehouse": SinkFatal("cannot create out: Not a directory")}
    with pytest.raises(SinkCannotStart, match="sink 'warehouse' cannot start: cannot create") as e:
        check_sinks(_factories(errors, closed), get_logger())
    assert e.value.sink == "warehouse"
    assert closed == ["cache", "warehouse"]


def test_a_sink_that_is_only_unavailable_does_not_stop_the_start() -> None:
    closed: list[str] = []
    errors: dict[str, Exception | None] = {"cache": SinkUnavailable("redis down"), "search": None}
    check_sinks(_factories(errors, closed), get_logger())
    assert closed == ["cache", "search"]


def test_an_unknown_error_at_open_stops_the_start() -> None:
    with pytest.raises(SinkCannotStart, match="boom"):
        check_sinks(_factories({"x": RuntimeError("boom")}, []), get_logger())


def test_the_first_start_is_the_one_without_stored_offsets(log: EmbeddedLog) -> None:
    assert is_first_start(log)
    tx = log.begin()
    tx.store_offsets({"postgres": {"lsn": 1}})
    tx.commit()
    assert not is_first_start(log)
