"""``cdc status`` on a Kafka pipeline, built in this process as a library caller (or the tests'
:func:`tests.e2e.cli_helpers.status_json`) builds it: every librdkafka client the report opened
(the log's AdminClient, the offsets readers of each sink's group, the partition reader) is
destroyed, its threads with it, by the time the report is returned.

A process exit used to hide it: the log's AdminClient (``close()``-less) was let go only when
the garbage collector freed the log, so the pytest process polling status held idle ``rdk:*``
threads, a client's worth per report.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc.config.models import KafkaLogConfig
from cdc.log.kafka import KafkaLog
from cdc.log.kafka.consumer import KafkaConsumer
from cdc.runtime.sink_names import group_name
from cdc.testing import wait_until
from tests.e2e.cli_helpers import status_json

REPORTS = 3
TABLE = "public.items"


def rdk_threads() -> dict[int, str]:
    """This process's librdkafka threads (``rdk:main``, ``rdk:broker1``...), by thread id:
    ``threading`` does not see them, the kernel names them."""
    found = {}
    for task in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{task}/comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if name.startswith("rdk:"):
            found[int(task)] = name
    return found


def write_pipeline(tmp_path: Path, name: str, bootstrap: str) -> Path:
    """A generator source (status asks it nothing) on Kafka, a sink that every worker writes
    (jsonl) and a single-writer one (duckdb: its report has the lease group's workers)."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"version: 1\nname: {name}\nsource:\n  type: generator\n  tables: [{TABLE}]\n"
        f"log:\n  type: kafka\n  bootstrap_servers: {bootstrap}\n  partitions: 1\n"
        "sinks:\n  - name: files\n    type: jsonl\n    path: out/files\n"
        "  - name: wh\n    type: duckdb\n    path: out/wh.duckdb\n"
    )
    return path


@pytest.fixture
def member(kafka_server: Any) -> Iterator[tuple[str, KafkaConsumer]]:
    """A pipeline name and a member of its ``files`` sink's group, holding its partition: the
    group report and the offsets readers then ask a live group coordinator."""
    name = f"stc_{uuid.uuid4().hex[:10]}"
    servers = kafka_server.bootstrap_servers
    config = KafkaLogConfig(type="kafka", bootstrap_servers=servers, partitions=1)
    log = KafkaLog(name, config)
    consumer = log.consumer(group_name(name, "files"), [f"{name}.{TABLE}"])
    try:

        def assigned() -> bool:
            consumer.poll(1, 0.2)
            return bool(consumer.assignment())

        wait_until(assigned, 30, 0, describe="the member's assignment")
        yield name, consumer
    finally:
        consumer.close()
        log.close()


def test_status_reports_leave_no_librdkafka_client_open(
    kafka_server: Any, member: tuple[str, KafkaConsumer], tmp_path: Path
) -> None:
    name, consumer = member
    pipeline = write_pipeline(tmp_path, name, kafka_server.bootstrap_servers)
    gc.collect()  # what earlier tests left to the collector goes now, not during the reports
    before = rdk_threads()
    gc.disable()  # closed means closed by the report, not freed by a collection meanwhile
    try:
        for _ in range(REPORTS):
            report = status_json(pipeline, tmp_path)
            left = {tid: n for tid, n in rdk_threads().items() if tid not in before}
            assert left == {}, f"librdkafka threads a status report left running: {left}"
    finally:
        gc.enable()
    files, wh = report["sinks"]
    assert files["group"]["state"] == "Stable"  # asked of the coordinator, not "unknown"
    assert [m["partitions"] for m in files["group"]["members"]] == [[f"{name}.{TABLE}[0]"]]
    assert wh["workers"]["group"] == f"{name}.sink.wh.leader"
    assert "error" not in wh["workers"] and wh["workers"]["leader"] is None
    assert consumer.assignment()  # the member the reports described is still there
