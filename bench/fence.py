"""Read-your-writes fences: what ``cdc.fence.wait`` costs beyond the pipeline's own latency.

Starts a throwaway PostgreSQL 15 and Redis, and ``cdc run`` (a process of its own, as a user
runs it) with one table into a Redis sink on the embedded log (``--log kafka``: on a throwaway
Kafka 4 broker, ``tests/services/kafka.py``, or ``$CDC_TEST_KAFKA_BOOTSTRAP``'s; 3 partitions, as
the e2e fence test's pipeline). Then, one write at a time, alternating so all modes see the same
load:

- **visible** (the baseline: the pipeline's end-to-end latency as an application sees it): commit
  an INSERT, then poll Redis with ``GET`` in a tight loop until the row is there;
- **fence**: commit an INSERT, call ``Fences.wait(sink)`` (``position=None``: it reads
  ``pg_current_wal_lsn()`` on a new connection, as ``cdc wait --now`` does), then one ``GET``,
  which must find the row;
- **fence_at**: the same with the position the application read on its own connection right
  after its commit (``SELECT pg_current_wal_lsn()``), so no connection is opened per fence;
- **fence_other**: an INSERT into a table no sink takes, then a fence: the source's stored
  position moves by its idle offers (the walsender asked every 100 ms, offers 50 ms apart).

Prints p50 and p99 of each in ms, and of the fence's latency beyond the baseline, then the bench
JSON lines (:mod:`bench.report`; bench ``fence``, or ``fence_kafka`` on Kafka). Run:
``.venv/bin/python -m bench.fence [--writes 300] [--log {embedded,kafka}]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import redis

# Run as a script (python bench/NAME.py, as the README gives it), the repository root goes first
# on sys.path so that bench, cdc and tests import.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import Figures
from cdc import fence
from cdc.support.wait import wait_until


def log_block(directory: Path, bootstrap: str | None) -> str:
    """The pipeline's ``log:``: embedded in ``directory``, or Kafka at ``bootstrap`` as
    tests/e2e/test_fence.py's Kafka test writes it."""
    if bootstrap is None:
        return f"{{type: embedded, path: '{directory / 'log'}'}}"
    return f"{{type: kafka, bootstrap_servers: '{bootstrap}', partitions: 3}}"


def pipeline_name(bootstrap: str | None) -> str:
    # A broker given by $CDC_TEST_KAFKA_BOOTSTRAP may hold an earlier run's topics.
    return "fencebench" if bootstrap is None else f"fencebench_{uuid.uuid4().hex[:8]}"


def pipeline_file(
    directory: Path, dsn: str, url: str, listen: str, bootstrap: str | None = None
) -> Path:
    path = directory / "fence.yaml"
    path.write_text(
        f"""version: 1
name: {pipeline_name(bootstrap)}
source: {{type: postgres, dsn: '{dsn}', tables: [public.notes]}}
log: {log_block(directory, bootstrap)}
sinks:
  - {{name: cache, type: redis, url: '{url}'}}
metrics: {{listen: '{listen}'}}
"""
    )
    return path


def ready(listen: str) -> bool:
    url = f"http://{listen}/readyz"
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as reply:
        return bool(reply.status == 200)
    return False


def measure(
    conn: psycopg.Connection[Any],
    cache: redis.Redis,
    prefix: str,
    n: int,
    waiter: Callable[[int], None],
    captured: bool = True,
) -> float:
    """ms from the INSERT's commit to ``waiter`` returning, then check the row is there
    (``captured``: into the sink's table, else into one no sink takes)."""
    insert = "INSERT INTO notes VALUES (%s, 'x')" if captured else "INSERT INTO other VALUES (%s)"
    conn.execute(insert, (n,))
    started = time.perf_counter()
    waiter(n)
    took = (time.perf_counter() - started) * 1000
    if captured and cache.get(f"{prefix}{n}") is None:
        raise AssertionError(f"row {n} not in Redis after the wait")
    return took


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@contextlib.contextmanager
def kafka_broker() -> Iterator[str]:
    """``$CDC_TEST_KAFKA_BOOTSTRAP``, else a throwaway local broker (as bench/kafka_log.py)."""
    bootstrap = os.environ.get("CDC_TEST_KAFKA_BOOTSTRAP")
    if bootstrap:
        yield bootstrap
        return
    from tests.services.kafka import LocalKafka

    with LocalKafka() as local:
        yield local.bootstrap_servers


def run(writes: int, log_type: str = "embedded") -> dict[str, list[float]]:
    from tests.services.ports import LOOPBACK, free_port
    from tests.services.postgres import LocalPostgres
    from tests.services.redis import own_redis

    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(kafka_broker()) if log_type == "kafka" else None
        pg = stack.enter_context(LocalPostgres())
        server = stack.enter_context(own_redis(appendonly=False))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc-fence-")))
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
        conn.execute("CREATE TABLE other (id int PRIMARY KEY)")
        listen = f"{LOOPBACK}:{free_port()}"
        path = pipeline_file(tmp, dsn, server.url, listen, bootstrap)
        log = (tmp / "run.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdc.cli.main", "run", str(path)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(proc.wait, 15)
        stack.callback(proc.terminate)
        wait_until(lambda: ready(listen), 120, 0.1, describe="the pipeline ready")
        cache = redis.Redis.from_url(server.url)
        fences = stack.enter_context(fence.Fences(path))
        prefix = f"{fences.pipeline.name}:public.notes:"  # the Redis sink's keys

        def visible(n: int) -> None:
            key = f"{prefix}{n}"
            while cache.get(key) is None:
                pass

        def at_own_lsn(n: int) -> None:
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
            fences.wait("cache", str(lsn))

        modes = {
            "visible": visible,
            "fence": lambda n: fences.wait("cache"),
            "fence_at": at_own_lsn,
            "fence_other": lambda n: fences.wait("cache"),
        }
        took: dict[str, list[float]] = {m: [] for m in modes}
        conn.execute("INSERT INTO other VALUES (-1)")
        fences.wait("cache", timeout_s=60)  # past the session's first idle offer (1 s)
        for n in range(writes * len(modes)):
            mode = list(modes)[n % len(modes)]
            took[mode].append(measure(conn, cache, prefix, n, modes[mode], mode != "fence_other"))
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--writes", type=int, default=300, help="writes per mode")
    parser.add_argument(
        "--log",
        choices=("embedded", "kafka"),
        default="embedded",
        help="the pipeline's log (kafka: a throwaway local broker, or $CDC_TEST_KAFKA_BOOTSTRAP)",
    )
    args = parser.parse_args()
    cpu = time.process_time()
    took = run(args.writes, args.log)
    print(f"log: {args.log}")
    # Kafka's figures under a bench name of their own: the embedded log's keep theirs.
    figures = Figures("fence" if args.log == "embedded" else "fence_kafka")
    base50, base99 = percentile(took["visible"], 50), percentile(took["visible"], 99)
    for mode in ("visible", "fence", "fence_at", "fence_other"):
        p50, p99 = percentile(took[mode], 50), percentile(took[mode], 99)
        print(
            f"{mode:9} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  "
            f"mean {statistics.mean(took[mode]):7.2f} ms"
        )
        if mode != "visible":
            print(f"{'':9} beyond visible: p50 {p50 - base50:+.2f} ms  p99 {p99 - base99:+.2f} ms")
            figures.add(f"{mode}_p50_ms", p50, base50)
            figures.add(f"{mode}_p99_ms", p99, base99)
    print(f"bench process CPU: {time.process_time() - cpu:.1f} s for {4 * args.writes} writes")
    figures.emit()


if __name__ == "__main__":
    main()
