"""Redis and search sink throughput against Redis's and Tantivy's own bulk writes of the same rows.

The workload is the DuckDB bench's (:mod:`sinks_duckdb`, so the sinks are compared on the same
data): N changes of a 6-column table, about 80% inserts, 15% updates and 5% deletes (each delete
followed by its tombstone), appended to a real :class:`~cdc.log.embedded.EmbeddedLog` with the
table's schema on the schema topic. The real :class:`~cdc.runtime.sink_task.SinkTask` then
applies them (poll, decode, write, flush with the offsets, commit the consumer offsets), timed
from start to the last committed offset.

Baselines, in the same run:

- Redis: the same keys and row JSON written with redis-py pipelines of ``SET`` (``DEL`` for a
  delete), 100 commands a pipeline as ``redis-benchmark -P 100`` does, no guard and no offsets;
  plus ``redis-benchmark -P 100 -t set`` itself with the same count and average value size.
- Search: Tantivy's own bulk add of the same documents (the sink's schema and document JSON,
  built outside the clock), one writer, one commit.

Redis is ``$CDC_BENCH_REDIS_URL`` or a throwaway local ``redis-server`` (no persistence).

Usage: ``python bench/sinks_redis_search.py [--changes N] [--batch B] [--only redis|search]``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import redis
import tantivy

# Run as a script, this folder comes first on sys.path, and bench/sinks.py would shadow the
# sinks package: the repository root goes first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures, add_sink
from bench.sinks_duckdb import TABLE, changes, fill_log, run_sink
from cdc.contracts.events import ChangeEvent, Op
from cdc.log.embedded import EmbeddedLog
from cdc.support.logging import configure
from sinks.keyed import key_suffix
from sinks.redis import RedisSink, RedisSinkConfig
from sinks.search import SearchSink, SearchSinkConfig
from sinks.search.index import SCHEMA, row_document, row_text

REDIS_TARGET = 50_000
SEARCH_TARGET = 20_000


@contextmanager
def redis_url() -> Iterator[str]:
    """``$CDC_BENCH_REDIS_URL``, else a throwaway local server."""
    given = os.environ.get("CDC_BENCH_REDIS_URL")
    if given:
        yield given
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp]
        command += ["--save", "", "--appendonly", "no", "--loglevel", "warning"]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        try:
            _wait_ping(url)
            yield url
        finally:
            server.terminate()
            server.wait(30)


def _wait_ping(url: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            redis.Redis.from_url(url).ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def filled_log(n: int) -> Iterator[tuple[EmbeddedLog, int, Path]]:
    """A log holding the ``n`` changes of the workload; yields ``(log, records, directory)``.

    The events are dropped once appended: half a million live objects would make every
    garbage collection in the sink task scan them, which a real pipeline process never does.
    """
    with tempfile.TemporaryDirectory(prefix="bench-sinks-") as tmp:
        log = EmbeddedLog(Path(tmp) / "log", durability="normal")
        try:
            records = fill_log(log, changes(n))
            gc.collect()
            yield log, records, Path(tmp)
        finally:
            log.close()


def redis_cpu(url: str) -> Callable[[], float]:
    """CPU seconds of this process plus the Redis server's (the work is split between them)."""
    client = redis.Redis.from_url(url)

    def read() -> float:
        info = client.info("cpu")
        return time.process_time() + float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    return read


def redis_baseline(url: str, events: list[ChangeEvent]) -> tuple[float, float]:
    """Wall and CPU seconds of redis-py pipelines of 100 ``SET``/``DEL``, same keys and rows."""
    prefix = f"base:{TABLE[0]}.{TABLE[1]}:"
    commands = [
        (prefix + key_suffix(e.key), orjson.dumps(e.after) if e.op is not Op.DELETE else None)
        for e in events
    ]
    client = redis.Redis.from_url(url)
    cpu = redis_cpu(url)
    started, cpu_started = time.perf_counter(), cpu()
    for start in range(0, len(commands), 100):
        pipe = client.pipeline(transaction=False)
        for key, value in commands[start : start + 100]:
            if value is None:
                pipe.delete(key)
            else:
                pipe.set(key, value)
        pipe.execute()
    elapsed, cpu_s = time.perf_counter() - started, cpu() - cpu_started
    client.close()
    return elapsed, cpu_s


def redis_benchmark(url: str, n: int, size: int) -> float | None:
    """Requests/s of ``redis-benchmark -P 100 -t set`` (``None`` where it is not installed)."""
    match = re.match(r"redis://(?:[^@]*@)?([^:/]+):(\d+)", url)
    if match is None:
        return None
    command = ["redis-benchmark", "-h", match[1], "-p", match[2], "-P", "100", "-t", "set"]
    command += ["-n", str(n), "-d", str(size), "-r", str(n), "-q"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=600).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.findall(r"SET: ([\d.]+) requests per second", out)
    return float(found[-1]) if found else None


def bench_redis(n: int = 500_000, batch: int = 5000) -> dict[str, Any]:
    """Apply ``n`` changes through the Redis sink task and the baselines; returns the figures."""
    with redis_url() as url, filled_log(n) as (log, records, _):
        config = RedisSinkConfig(name="cache", type="redis", url=url, key_prefix="bench")
        make = functools.partial(RedisSink, config)
        sink_s, sink_cpu = run_sink(log, "cache", make, records, batch, redis_cpu(url))
        events = changes(n)
        base_s, base_cpu = redis_baseline(url, events)
        size = sum(len(orjson.dumps(e.after)) for e in events[:10_000] if e.after) // 10_000
        tool = redis_benchmark(url, n, size)
    result: dict[str, Any] = {
        "sink": "redis",
        "changes": n,
        "records": records,
        "batch": batch,
        "sink_s": round(sink_s, 2),
        "sink_rows_per_s": round(n / sink_s),
        "sink_rows_per_cpu_s": round(n / sink_cpu),
        "baseline_rows_per_s": round(n / base_s),
        "baseline_rows_per_cpu_s": round(n / base_cpu),
        "redis_benchmark_set_per_s": round(tool) if tool else None,
        "avg_value_bytes": size,
        "target_rows_per_s": REDIS_TARGET,
    }
    result["ratio_to_baseline"] = round(
        result["sink_rows_per_s"] / result["baseline_rows_per_s"], 3
    )
    result["cpu_ratio_to_baseline"] = round(base_cpu / sink_cpu, 3)
    if tool:
        result["ratio_to_redis_benchmark"] = round(result["sink_rows_per_s"] / tool, 3)
    result["target_met"] = result["sink_rows_per_s"] >= REDIS_TARGET
    return result


def search_baseline(events: list[ChangeEvent], directory: Path) -> tuple[float, float]:
    """Documents per second and per CPU second of Tantivy's bulk add of every change's
    document: one writer, one commit."""
    text = frozenset({"customer"})
    documents = [
        row_document(orjson.dumps(e.key).decode(), (i, 0), i, e.after, row_text(e.after, text))
        for i, e in enumerate(events)
        if e.after is not None
    ]
    path = directory / "baseline-index"
    path.mkdir()
    index = tantivy.Index(SCHEMA, path=str(path))
    writer = index.writer(heap_size=64 << 20, num_threads=1)
    started, cpu_started = time.perf_counter(), time.process_time()
    for document in documents:
        writer.add_json(document)
    writer.commit()
    elapsed, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    writer.wait_merging_threads()
    return len(documents) / elapsed, len(documents) / cpu_s


def bench_search(n: int = 500_000, batch: int = 5000) -> dict[str, Any]:
    """Apply ``n`` changes through the search sink task and Tantivy's bulk add."""
    with filled_log(n) as (log, records, directory):
        config = SearchSinkConfig(name="search", type="search", path=str(directory / "search"))
        sink_s, sink_cpu = run_sink(
            log, "search", functools.partial(SearchSink, config), records, batch
        )
        base_rate, base_cpu_rate = search_baseline(changes(n), directory)
    result: dict[str, Any] = {
        "sink": "search",
        "changes": n,
        "records": records,
        "batch": batch,
        "sink_s": round(sink_s, 2),
        "sink_rows_per_s": round(n / sink_s),
        "sink_rows_per_cpu_s": round(n / sink_cpu),
        "baseline_rows_per_s": round(base_rate),
        "baseline_rows_per_cpu_s": round(base_cpu_rate),
        "target_rows_per_s": SEARCH_TARGET,
    }
    result["ratio_to_baseline"] = round(
        result["sink_rows_per_s"] / result["baseline_rows_per_s"], 3
    )
    result["cpu_ratio_to_baseline"] = round(n / sink_cpu / base_cpu_rate, 3)
    result["target_met"] = result["sink_rows_per_s"] >= SEARCH_TARGET
    return result


def report(r: dict[str, Any], baseline: str) -> None:
    met = "met" if r["target_met"] else "NOT met"
    print(
        f"{r['sink']} sink: {r['changes']:,} changes ({r['records']:,} records) in {r['sink_s']} s"
        f" through the sink task, batches of {r['batch']}: {r['sink_rows_per_s']:,} rows/s"
        f" (target {r['target_rows_per_s']:,}: {met})"
    )
    print(f"  baseline, {baseline}: {r['baseline_rows_per_s']:,} rows/s")
    if r.get("redis_benchmark_set_per_s"):
        print(
            f"  redis-benchmark -P 100 -t set -d {r['avg_value_bytes']}: "
            f"{r['redis_benchmark_set_per_s']:,} SET/s"
            f" (ratio {r['ratio_to_redis_benchmark']})"
        )
    print(f"  ratio sink/baseline: {r['ratio_to_baseline']}")
    print(
        f"  per CPU second (this process{' + redis-server' if r['sink'] == 'redis' else ''}): "
        f"sink {r['sink_rows_per_cpu_s']:,} rows, baseline {r['baseline_rows_per_cpu_s']:,}, "
        f"ratio {r['cpu_ratio_to_baseline']} (less sensitive to a busy machine)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=5000, help="sink task max_records")
    parser.add_argument("--only", choices=["redis", "search"])
    args = parser.parse_args()
    configure(level="warning")
    figures = Figures("sinks_redis_search")
    if args.only != "search":
        result = bench_redis(args.changes, args.batch)
        report(result, "redis-py pipelined SET/DEL, 100 a round trip")
        add_sink(figures, result)
    if args.only != "redis":
        result = bench_search(args.changes, args.batch)
        report(result, "Tantivy bulk add, one writer, one commit")
        add_sink(figures, result)
    figures.emit()


if __name__ == "__main__":
    main()
