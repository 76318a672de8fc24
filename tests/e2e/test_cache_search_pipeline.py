"""``cdc run`` with the Redis and search sinks: killed with SIGKILL mid-run, restarted, and both
sinks end equal, row by row, to the state the compacted topic describes."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import orjson

from sinks.redis import RedisSinkConfig, RedisSinkPlugin
from sinks.search import SearchSinkConfig, SearchSinkPlugin
from tests.e2e.cli_helpers import (
    cdc,
    latest_per_key,
    start_run,
    status_json,
    stop,
    tail_all,
    wait_for,
)

CHANGES = 6000


def pipeline(tmp_path: Path, url: str, prefix: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"""
version: 1
name: gen
source:
  type: generator
  tables: [public.items]
  changes: {CHANGES}
  keys: 700
  rate: 2000
log:
  type: embedded
  partitions: 2
sinks:
  - name: cache
    type: redis
    url: {url}
    key_prefix: {prefix}
  - name: search
    type: search
    path: out/search
"""
    )
    return path


def generated(file: Path, cwd: Path) -> int:
    """Changes the generator has stored in the log so far."""
    offsets = status_json(file, cwd)["source"]["offsets"]
    return int(offsets.get("generator", {}).get("next", 0))


def by_key(rows: Any) -> dict[str, Any]:
    return {orjson.dumps({"id": row["id"]}).decode(): row for _, row in rows}


def test_sigkill_restart_and_both_sinks_equal_the_topic(tmp_path: Path, redis_server: Any) -> None:
    prefix = f"e2e{uuid.uuid4().hex[:8]}"
    file = pipeline(tmp_path, redis_server.url, prefix)
    cache = RedisSinkConfig(name="cache", type="redis", url=redis_server.url, key_prefix=prefix)
    search = SearchSinkConfig(name="search", type="search", path=str(tmp_path / "out/search"))
    run = start_run(file, tmp_path)
    # Mid-run: the generator has stored some of its changes, not all of them.
    wait_for(lambda: generated(file, tmp_path) >= 500, 60, process=run, log=tmp_path / "run.log")
    run.send_signal(signal.SIGKILL)
    run.wait(10)
    at_kill = generated(file, tmp_path)  # what is stored after the kill was stored at it
    assert 0 < at_kill < CHANGES, f"killed with {at_kill} of {CHANGES} stored: not mid-run"
    run = start_run(file, tmp_path)
    try:
        topic = "gen.public.items"

        def converged() -> bool:
            if "gen.public.items" not in cdc("topics", str(file), cwd=tmp_path).stdout:
                return False  # the restarted run has not created the topic yet
            records = tail_all(file, topic, tmp_path)
            if sum(1 for r in records if r["value"] is not None) < CHANGES:
                return False  # the generator is not done yet
            state = latest_per_key(records)
            cached = by_key(RedisSinkPlugin.read_rows(cache, "public", "items"))
            indexed = by_key(SearchSinkPlugin.read_rows(search, "public", "items"))
            return cached == state and indexed == state

        wait_for(converged, timeout=120, interval=1.0)
    finally:
        code, _ = stop(run)
    assert code == 0, (tmp_path / "run.log").read_text()[-2000:]
    hits = cdc("search", str(file), "public.items", "customer", "--limit", "3", cwd=tmp_path)
    assert hits.returncode == 0, hits.stderr
    assert len(hits.stdout.splitlines()) == 3
