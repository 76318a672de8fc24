"""What ``cdc run`` and ``cdc sink`` log on Kafka: a broker outage (lost, then restored, on the
source's producer and on the sink worker's consumer) and a rebalance (each worker's partitions
revoked and assigned), as structlog events with stable names."""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.e2e.cli_helpers import cdc_env, start_run, stop, wait_for
from tests.e2e.test_kafka_pipeline import stored_next, write_pipeline
from tests.services.kafka import outage


def events(log: Path, name: str, **fields: Any) -> list[dict[str, Any]]:
    """The JSON log lines of event ``name`` whose fields include ``fields``."""
    out = []
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        event = orjson.loads(line)
        if event.get("event") == name and all(event.get(k) == v for k, v in fields.items()):
            out.append(event)
    return out


def holds(log: Path) -> list[str] | None:
    """The partitions the run's worker holds after its last rebalance event (``None`` while
    it holds none)."""
    last = None
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            event = orjson.loads(line)
            if str(event.get("event", "")).startswith("kafka.partitions_"):
                last = event
    if last is None or last["event"] != "kafka.partitions_assigned":
        return None
    return list(last["partitions"])


def test_broker_outage_and_rebalance_are_logged(kafka_server: Any, tmp_path: Path) -> None:
    pipeline, _ = write_pipeline(tmp_path, kafka_server.bootstrap_servers, 100_000, rate=200)
    run_log, worker_log = tmp_path / "run.log", tmp_path / "worker.log"
    run = start_run(pipeline, tmp_path)
    workers: list[subprocess.Popen[Any]] = []  # the second worker, once started
    try:
        _check_the_first_assignment_and_wait_for_records(tmp_path, pipeline, run, run_log)
        _check_a_broker_outage_is_logged_by_both_clients(kafka_server, run, run_log)
        # A second worker joins the sink's group: the first gives partitions up.
        _check_a_second_worker_takes_partitions_over(
            tmp_path, pipeline, run, (run_log, worker_log), workers
        )
    finally:
        for process in (*workers, run):
            if process is not None and process.poll() is None:
                stop(process, signal.SIGTERM, 20)


def _check_the_first_assignment_and_wait_for_records(
    tmp_path: Path, pipeline: Path, run: subprocess.Popen[str], run_log: Path
) -> None:
    wait_for(lambda: events(run_log, "kafka.partitions_assigned"), 90, 0.2, run, run_log)
    [assigned] = events(run_log, "kafka.partitions_assigned")
    assert len(assigned["partitions"]) == 6  # two topics of three partitions
    assert assigned["group"].endswith("files") and assigned["member"]
    wait_for(lambda: stored_next(tmp_path, pipeline) >= 200, 90, 0.5, run, run_log)


def _check_a_broker_outage_is_logged_by_both_clients(
    kafka_server: Any, run: subprocess.Popen[str], run_log: Path
) -> None:
    # The session's broker: started again however the wait ends (the next tests need it).
    with outage(kafka_server):
        for client in ("producer", "consumer"):
            lost = functools.partial(events, run_log, "kafka.connection_lost", client=client)
            wait_for(lost, 60, 0.2, run, run_log)
    for client in ("producer", "consumer"):
        wait_for(
            lambda c=client: events(run_log, "kafka.connection_restored", client=c),
            90,
            0.2,
            run,
            run_log,
        )
    lost = events(run_log, "kafka.connection_lost", client="consumer")[0]
    assert lost["error"] in ("_TRANSPORT", "_ALL_BROKERS_DOWN") and lost["group"]
    assert all(e["down_s"] > 0 for e in events(run_log, "kafka.connection_restored"))


def _check_a_second_worker_takes_partitions_over(
    tmp_path: Path,
    pipeline: Path,
    run: subprocess.Popen[str],
    logs: tuple[Path, Path],
    workers: list[subprocess.Popen[Any]],
) -> None:
    run_log, worker_log = logs
    wait_for(lambda: holds(run_log), 90, 0.2, run, run_log)  # (re)joined after the outage
    revokes = len(events(run_log, "kafka.partitions_revoked"))
    assigns = len(events(run_log, "kafka.partitions_assigned"))
    worker = subprocess.Popen(
        [sys.executable, "-m", "cdc.cli.main", "sink", str(pipeline), "files"],
        cwd=tmp_path,
        env=cdc_env({"OUT_DIR": str(tmp_path / "worker2")}),
        stdout=worker_log.open("a"),
        stderr=subprocess.STDOUT,
    )
    workers.append(worker)
    wait_for(lambda: events(worker_log, "kafka.partitions_assigned"), 90, 0.2, worker)
    wait_for(lambda: len(events(run_log, "kafka.partitions_assigned")) > assigns, 60, 0.2)
    revoked = events(run_log, "kafka.partitions_revoked")[revokes:]
    assert revoked and len(revoked[0]["partitions"]) == 6
    first = events(run_log, "kafka.partitions_assigned")[-1]["partitions"]
    second = events(worker_log, "kafka.partitions_assigned")[-1]["partitions"]
    assert first and second and not set(first) & set(second)
    assert len(first) + len(second) == 6
