"""``cdc status`` shows each sink's lag per partition and its consumer group: on Kafka, the
members and which partitions each one owns (two ``cdc sink`` workers share them, then one
stops and the other owns them all); on the embedded log, that members are not tracked."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.e2e.cli_helpers import cdc, cdc_env, start_run, stop, wait_for
from tests.e2e.test_kafka_pipeline import TABLES, done, status, write_pipeline

PARTITIONS = 4


def owned(report: dict[str, Any]) -> dict[str, set[str]]:
    """Member id to the partitions it owns, from the group of the report's one sink."""
    members = report["sinks"][0]["group"]["members"] or []
    return {m["member_id"]: set(m["partitions"]) for m in members}


def every_partition(name: str) -> set[str]:
    return {f"{name}.{t}[{p}]" for t in TABLES for p in range(PARTITIONS)}


def split_between(members: int, name: str) -> Any:
    """A predicate: the group is stable with ``members`` members that each own some
    partitions, none twice, all of them in all (``last`` keeps the report it saw)."""
    last: dict[str, Any] = {}

    def check(report: dict[str, Any]) -> bool:
        last["group"] = report["sinks"][0]["group"]
        shares = list(owned(report).values())
        return (
            report["sinks"][0]["group"]["state"] == "Stable"
            and len(shares) == members
            and all(shares)
            and sum(len(s) for s in shares) == len(every_partition(name))
            and set().union(*shares) == every_partition(name)
        )

    return check, last


def assert_lag_per_partition(report: dict[str, Any]) -> None:
    """Every topic lists its partitions, each with its lag and its owner, adding up."""
    sink = report["sinks"][0]
    owners = {p: m for m, parts in owned(report).items() for p in parts}
    for topic in sink["topics"]:
        rows = topic["partitions"]
        assert [row["partition"] for row in rows] == list(range(PARTITIONS))
        for row in rows:
            assert row["lag"] == row["end"] - row["committed"] >= 0
            assert row["owner"] == owners[f"{topic['topic']}[{row['partition']}]"]
        assert sum(row["lag"] for row in rows) == topic["lag"]
        assert sum(row["end"] for row in rows) == topic["end"]


def start_worker(pipeline: Path, tmp_path: Path, out: Path) -> subprocess.Popen[Any]:
    return subprocess.Popen(
        [sys.executable, "-m", "cdc.cli.main", "sink", str(pipeline), "files"],
        cwd=tmp_path,
        env=cdc_env({"OUT_DIR": str(out)}),
        stdout=(tmp_path / f"{out.name}.log").open("a"),
        stderr=subprocess.STDOUT,
    )


def test_status_shows_the_members_their_partitions_and_lag_per_partition(
    kafka_server: Any, tmp_path: Path
) -> None:
    bootstrap = kafka_server.bootstrap_servers
    pipeline, name = write_pipeline(
        tmp_path, bootstrap, changes=3000, rate=300, partitions=PARTITIONS
    )
    source = start_run(pipeline, tmp_path, None, "--role", "source")
    workers = [start_worker(pipeline, tmp_path, tmp_path / f"worker{i}") for i in (1, 2)]
    try:
        shared, seen = split_between(2, name)
        wait_for(lambda: shared(status(tmp_path, pipeline)), timeout=90, last_seen=seen)
        report = status(tmp_path, pipeline)
        assert_lag_per_partition(report)
        members = report["sinks"][0]["group"]["members"]
        assert all(m["client_id"] and m["host"] for m in members)
        text = cdc("status", str(pipeline), cwd=tmp_path)
        assert text.returncode == 0, text.stderr
        assert "2 members" in text.stdout
        for member in members:  # each listed, numbered, with what it owns
            assert member["member_id"] in text.stdout
        # One worker stops: the other one owns every partition.
        stop(workers[0], signal.SIGTERM, 30)
        alone, seen = split_between(1, name)
        wait_for(lambda: alone(status(tmp_path, pipeline)), timeout=90, last_seen=seen)
        wait_for(lambda: done(tmp_path, pipeline, 3000), timeout=120, interval=0.5)
        report = status(tmp_path, pipeline)
        assert_lag_per_partition(report)
        assert all(row["lag"] == 0 for t in report["sinks"][0]["topics"] for row in t["partitions"])
    finally:
        for process in [source, *workers]:
            if process.poll() is None:
                stop(process, signal.SIGTERM, 20)


def test_embedded_status_shows_lag_per_partition_and_untracked_members(tmp_path: Path) -> None:
    pipeline = tmp_path / "gen.yaml"
    pipeline.write_text(
        "version: 1\nname: gen\nsource:\n  type: generator\n  tables: [public.t]\n"
        "  changes: 50\n  keys: 20\nlog:\n  type: embedded\n  partitions: 3\n"
        "sinks:\n  - name: files\n    type: jsonl\n    path: out/files\n"
    )
    run = start_run(pipeline, tmp_path)
    try:
        wait_for(lambda: done(tmp_path, pipeline, 50), timeout=60, process=run)
    finally:
        stop(run, signal.SIGTERM, 20)
    report = orjson.loads(cdc("status", str(pipeline), "--json", cwd=tmp_path).stdout)
    [sink] = report["sinks"]
    assert sink["group"]["state"] == "not tracked" and sink["group"]["members"] is None
    [topic] = sink["topics"]
    assert [row["partition"] for row in topic["partitions"]] == [0, 1, 2]
    assert sum(row["end"] for row in topic["partitions"]) == topic["end"] > 0
    assert all(row["lag"] == 0 and row["owner"] is None for row in topic["partitions"])
    text = cdc("status", str(pipeline), cwd=tmp_path).stdout
    assert "members not tracked (the embedded log has none" in text
