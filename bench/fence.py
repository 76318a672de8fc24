"""Read-your-writes fences: what ``cdc.fence.wait`` costs beyond the pipeline's own latency.

Starts a throwaway PostgreSQL 15 and Redis, and ``cdc run`` (a process of its own, as a user
runs it) with one table into a Redis sink on the embedded log. Then, one write at a time,
alternating so both see the same load:

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
JSON lines (:mod:`bench.report`). Run: ``.venv/bin/python -m bench.fence [--writes 300]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
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


def pipeline_file(directory: Path, dsn: str, url: str, listen: str) -> Path:
    path = directory / "fence.yaml"
    path.write_text(
        f"""version: 1
name: fencebench
source: {{type: postgres, dsn: '{dsn}', tables: [public.notes]}}
log: {{type: embedded, path: '{directory / "log"}'}}
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
    if captured and cache.get(f"fencebench:public.notes:{n}") is None:
        raise AssertionError(f"row {n} not in Redis after the wait")
    return took


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(writes: int) -> dict[str, list[float]]:
    from tests.services.ports import LOOPBACK, free_port
    from tests.services.postgres import LocalPostgres
    from tests.services.redis import own_redis

    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(LocalPostgres())
        server = stack.enter_context(own_redis(appendonly=False))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc-fence-")))
        dsn = pg.dsn_for(dbname=pg.create_database("bench"))
        conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
        conn.execute("CREATE TABLE other (id int PRIMARY KEY)")
        listen = f"{LOOPBACK}:{free_port()}"
        path = pipeline_file(tmp, dsn, server.url, listen)
        log = (tmp / "run.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "cdc.cli.main", "run", str(path)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(proc.wait, 15)
        stack.callback(proc.terminate)
        wait_until(lambda: ready(listen), 60, 0.1, describe="the pipeline ready")
        cache = redis.Redis.from_url(server.url)
        fences = stack.enter_context(fence.Fences(path))

        def visible(n: int) -> None:
            key = f"fencebench:public.notes:{n}"
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
        fences.wait("cache")  # past the session's first idle offer (1 s)
        for n in range(writes * len(modes)):
            mode = list(modes)[n % len(modes)]
            took[mode].append(measure(conn, cache, n, modes[mode], mode != "fence_other"))
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--writes", type=int, default=300, help="writes per mode")
    args = parser.parse_args()
    cpu = time.process_time()
    took = run(args.writes)
    figures = Figures("fence")
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
