"""Whole pipelines through the CLI on the embedded log: the generator source into the jsonl
sink, with clean stops, SIGKILLs and restarts."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import orjson

from tests.e2e.cli_helpers import cdc, start_run, status_json, stop, tail_all, wait_for
from tests.e2e.snapshot_helpers import offsets

CHANGES = 6000
TABLES = ("public.customers", "public.orders")


def write_pipeline(tmp_path: Path, changes: int = CHANGES, rate: int | None = None) -> Path:
    rate_line = f"  rate: {rate}\n" if rate else ""
    path = tmp_path / "gen.yaml"
    path.write_text(
        "version: 1\nname: gen\nsource:\n  type: generator\n"
        f"  tables: [{', '.join(TABLES)}]\n  changes: {changes}\n  keys: 300\n"
        f"  transaction_size: 25\n{rate_line}"
        "log:\n  type: embedded\n  partitions: 3\n"
        "sinks:\n  - name: files\n    type: jsonl\n    path: out/files\n"
    )
    return path


def stored_next(tmp_path: Path, pipeline: Path) -> int:
    """The generator's stored position, read from the log in this process: the SIGKILL test
    kills right after seeing it, and a ``cdc status`` subprocess (a second or more on a loaded
    machine) let the generator run on to its end between the look and the kill."""
    del pipeline  # the log is at the default place, .cdc/<name> under the run's directory
    return int(offsets(tmp_path / ".cdc" / "gen").get("generator", {}).get("next", 0))


def sink_lag(tmp_path: Path, pipeline: Path) -> int:
    return int(status_json(pipeline, tmp_path)["sinks"][0]["lag"])


def jsonl_lines(tmp_path: Path, topic: str) -> list[dict[str, object]]:
    path = tmp_path / "out" / "files" / f"{topic}.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def assert_sink_equals_topics(tmp_path: Path, pipeline: Path) -> int:
    """The jsonl sink holds every record of every topic exactly once, in offset order."""
    total = 0
    for table in TABLES:
        topic = f"gen.{table}"
        in_log = [
            (r["partition"], r["offset"], r["value"]) for r in tail_all(pipeline, topic, tmp_path)
        ]
        in_sink = [(r["partition"], r["offset"], r["value"]) for r in jsonl_lines(tmp_path, topic)]
        assert sorted(in_sink, key=lambda r: (r[0], r[1])) == sorted(
            in_log, key=lambda r: (r[0], r[1])
        )
        assert len({(p, o) for p, o, _ in in_sink}) == len(in_sink)  # no duplicates
        total += len(in_log)
    return total


def test_sigterm_stops_cleanly_and_a_restart_continues(tmp_path: Path) -> None:
    pipeline = write_pipeline(tmp_path, rate=2000)
    process = start_run(pipeline, tmp_path)
    wait_for(lambda: stored_next(tmp_path, pipeline) > 500, timeout=30)
    code, took = stop(process, signal.SIGTERM)
    assert code == 0, (tmp_path / "run.log").read_text()
    assert took < 10
    assert "pipeline.stopped" in (tmp_path / "run.log").read_text()
    first = stored_next(tmp_path, pipeline)
    assert 0 < first < CHANGES
    process = start_run(pipeline, tmp_path)
    wait_for(
        lambda: stored_next(tmp_path, pipeline) == CHANGES and sink_lag(tmp_path, pipeline) == 0,
        timeout=60,
    )
    assert stop(process)[0] == 0
    assert assert_sink_equals_topics(tmp_path, pipeline) > CHANGES


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    pipeline = write_pipeline(tmp_path, changes=20000, rate=4000)
    rng = random.Random(11)
    stored = 0
    for _ in range(3):
        process = start_run(pipeline, tmp_path)
        # Kill at a random point once this run has stored changes of its own. The changes
        # stored after the kill are those stored at it: some more, not all, or it tested nothing.
        target = stored + rng.randint(1000, 3000)
        wait_for(
            lambda target=target: stored_next(tmp_path, pipeline) >= target,
            timeout=60,
            process=process,
            log=tmp_path / "run.log",
        )
        stop(process, signal.SIGKILL)
        at_kill = stored_next(tmp_path, pipeline)
        assert stored < at_kill < 20000, f"killed with {at_kill} of 20000 stored: not mid-work"
        stored = at_kill
    process = start_run(pipeline, tmp_path)
    wait_for(
        lambda: stored_next(tmp_path, pipeline) == 20000 and sink_lag(tmp_path, pipeline) == 0,
        timeout=90,
    )
    assert stop(process)[0] == 0
    assert_sink_equals_topics(tmp_path, pipeline)
    # The source resumed exactly: every generated change is in the log once, in order.
    positions = []
    for table in TABLES:
        for record in tail_all(pipeline, f"gen.{table}", tmp_path):
            if record["value"] is not None:
                positions.append(tuple(record["pos"]))  # cdc tail: beside the value
    assert len(positions) == 20000
    assert len(set(positions)) == 20000


def test_topics_tail_and_status_output(tmp_path: Path) -> None:
    pipeline = write_pipeline(tmp_path, changes=300)
    process = start_run(pipeline, tmp_path)
    wait_for(
        lambda: stored_next(tmp_path, pipeline) == 300 and sink_lag(tmp_path, pipeline) == 0,
        timeout=30,
    )
    stop(process)
    topics = orjson.loads(cdc("topics", str(pipeline), "--json", cwd=tmp_path).stdout)
    names = {t["topic"] for t in topics}
    assert {"gen.public.customers", "gen.public.orders", "gen.__schemas"} <= names
    assert all(t["partitions"] == 3 for t in topics)
    limited = cdc(
        "tail",
        str(pipeline),
        "gen.public.orders",
        "--from-beginning",
        "--max-records",
        "5",
        cwd=tmp_path,
    )
    lines = [orjson.loads(x) for x in limited.stdout.splitlines()]
    assert len(lines) == 5
    # The change's source position beside Debezium's value (the log's cdc.pos), not in it.
    assert set(lines[0]) == {"topic", "partition", "offset", "key", "value", "pos"}
    assert "pos" not in lines[0]["value"]["source"] and len(lines[0]["pos"]) == 2
    assert (
        lines[0]["value"]["op"] == "c" and lines[0]["value"]["source"]["connector"] == "generator"
    )
    started = time.monotonic()
    idle = cdc("tail", str(pipeline), "gen.public.orders", "--timeout-s", "1", cwd=tmp_path)
    assert idle.returncode == 0 and idle.stdout == ""
    assert 0.9 < time.monotonic() - started < 10
    missing = cdc("tail", str(pipeline), "gen.nope", cwd=tmp_path)
    assert missing.returncode == 2 and "no topic" in missing.stderr
    human = cdc("status", str(pipeline), cwd=tmp_path)
    assert human.returncode == 0 and "files" in human.stdout
