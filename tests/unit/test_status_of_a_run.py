"""``cdc status`` of a pipeline running in this process: a sink that opened before the run's
first beat was written is ``running``, not ``starting``.

A fast sink (here jsonl) records ``running`` while ``start`` is still starting the run's other
parts; the beat's start time must be the run's, taken before any task started, or status
compares the sink's fresh state with a later start and calls it an earlier run's (the
``starting`` state of :mod:`cdc.cli.status_liveness`): CI's type matrix saw two sinks stay
``starting`` for the whole run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cdc.cli.status import status_report
from cdc.config.pipeline import parse
from cdc.runtime import pipeline as pipeline_module
from cdc.runtime.heartbeat import Heartbeat
from cdc.runtime.sink_control import SinkControl
from tests.unit.pipeline_run_kit import started

PIPELINE = (
    "version: 1\nname: shop\nsource:\n  type: postgres\n  dsn: postgresql://h/db\n"
    "  tables: [public.t]\nlog:\n  type: embedded\n  path: log\n"
    "sinks:\n  - name: files\n    type: jsonl\n    path: out\n"
)


def _wait(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_sink_open_before_the_first_beat_is_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = parse(PIPELINE)

    def after_the_sink_recorded_running(log: Any, *args: Any, **kwargs: Any) -> Heartbeat:
        # The order CI met: the sink's state is written before the heartbeat exists.
        control = SinkControl(log, config.name)
        _wait(lambda: (control.state("files") or {}).get("state") == "running")
        return Heartbeat(log, *args, **kwargs)

    monkeypatch.setattr(pipeline_module, "Heartbeat", after_the_sink_recorded_running)
    with started(config) as run:
        found: dict[str, Any] = {}

        def reported() -> bool:
            report = status_report(run.log, config)
            found.update(report)
            return bool(report["processes"])

        _wait(reported)
        [sink] = found["sinks"]
        assert (sink["sink"], sink["state"]) == ("files", "running"), sink
        [process] = found["processes"]
        assert process["started_ms"] <= sink["since_ms"]
