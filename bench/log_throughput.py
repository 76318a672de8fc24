"""Embedded log throughput against plain SQLite doing the same writes and reads.

Appends N records (~300 bytes: a ~15-byte JSON key, a ~285-byte Debezium-style JSON value) in
transactions of ``--batch`` records through :class:`cdc.log.embedded.EmbeddedLog`, then reads
them all back through a consumer. The baseline, in the same run, is plain batched SQLite on the
same table, indexes and pragmas: ``executemany`` per transaction, then ``SELECT`` by offset range.
The two alternate batch by batch, so load from other processes hits both alike.

Only the log's own work is timed: building the ``Record`` objects (the caller's input) happens
outside the clock, as building the key and value bytes does for the baseline; the baseline's
row tuples are built inside its clock, like the log's.

Usage: ``python bench/log_throughput.py [--records N] [--batch B] [--partitions P]``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from bench.report import Figures
from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded.store import INSERT_RECORD, SCHEMA, SELECT_RANGE, connect
from cdc.support.clock import now_ms

TOPIC = "shop.public.customers"
TARGET_APPEND = 100_000
TARGET_RATIO = 0.7
TARGET_READ = 400_000


def key(i: int) -> bytes:
    return b'{"id": %d}' % (100_000 + i)


def value(i: int) -> bytes:
    """A change event of the size a narrow table's row gives (~285 bytes)."""
    return orjson.dumps(
        {
            "before": None,
            "after": {"id": 100_000 + i, "name": f"c{i}", "balance": "1234.56"},
            "source": {
                "version": "0.1.0",
                "connector": "postgres",
                "name": "shop",
                "ts_ms": 1_700_000_000_000 + i,
                "snapshot": "false",
                "db": "shop",
                "schema": "public",
                "table": "customers",
                "txId": 1000 + i // 5000,
                "lsn": 123_456_789 + i,
            },
            "op": "c",
            "ts_ms": 1_700_000_000_000 + i,
        }
    )


def batches(records: int, batch: int) -> Iterator[tuple[list[bytes], list[bytes]]]:
    for start in range(0, records, batch):
        ids = range(start, min(records, start + batch))
        yield [key(i) for i in ids], [value(i) for i in ids]


class Baseline:
    """Plain SQLite: the same table, indexes and pragmas, one ``executemany`` per transaction."""

    def __init__(self, path: Path) -> None:
        self.conn = connect(path, "full")
        for statement in SCHEMA:
            self.conn.execute(statement)
        self.offset = 0
        self.position = 0

    def append(self, keys: list[bytes], values: list[bytes]) -> None:
        start, ts = self.offset, now_ms()
        self.conn.execute("BEGIN IMMEDIATE")
        rows = (
            (1, 0, start + i, k, v, ts, None, b"[%d,0]" % (start + i))
            for i, (k, v) in enumerate(zip(keys, values, strict=True))
        )
        self.conn.executemany(INSERT_RECORD, rows)
        self.conn.execute("COMMIT")
        self.offset += len(keys)

    def read(self, max_records: int) -> int:
        rows = self.conn.execute(SELECT_RANGE, (1, 0, self.position, max_records)).fetchall()
        self.position = rows[-1][0] + 1
        return len(rows)


class Clock:
    """Wall-clock and CPU seconds spent inside ``with clock:`` blocks, summed."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.thread_time()

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += time.thread_time() - self._cpu


Clocks = dict[str, Clock]  # "log append", "sqlite append", "log read", "sqlite read"


def bench(tmp: Path, args: argparse.Namespace) -> Clocks:
    """Time the log and the baseline, interleaved batch by batch.

    Interleaving makes load from other processes on a shared machine slow both alike, so the
    ratios stay meaningful even when the absolute rates do not.
    """
    clocks = {name: Clock() for name in ("log append", "sqlite append", "log read", "sqlite read")}
    log = EmbeddedLog(tmp / "log", partitions=args.partitions)
    log.ensure_topics([TOPIC])
    base = Baseline(tmp / "baseline.sqlite3")
    for number, (keys, values) in enumerate(batches(args.records, args.batch)):
        chunk = [Record(TOPIC, k, v) for k, v in zip(keys, values, strict=True)]
        with clocks["log append"], log.begin() as txn:
            txn.append(chunk)
            txn.store_offsets({"lsn": number})
        with clocks["sqlite append"]:
            base.append(keys, values)
    consumer = log.consumer("bench", [TOPIC])
    read = [0, 0]
    while read[0] < args.records:
        with clocks["log read"]:
            read[0] += len(consumer.poll(args.batch, 1.0))
        with clocks["sqlite read"]:
            read[1] += base.read(args.batch)
    assert read == [args.records, args.records], read
    log.close()
    base.conn.close()
    return clocks


def report(clocks: Clocks, args: argparse.Namespace) -> None:
    size = len(key(0)) + len(value(0))
    print(
        f"{args.records:,} records of ~{size} bytes, {args.batch:,} per transaction, "
        f"partitions={args.partitions}, synchronous=FULL, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'':11}{'embedded log':>16}{'plain sqlite':>16}{'ratio':>8}   target (wall clock)")
    for op, target in (("append", TARGET_APPEND), ("read", TARGET_READ)):
        ours, base = (args.records / clocks[f"{who} {op}"].wall for who in ("log", "sqlite"))
        ok = ours >= target and (op == "read" or ours / base >= TARGET_RATIO)
        goal = f">= {target:,} r/s" + (f" and >= {TARGET_RATIO}x" if op == "append" else "")
        print(
            f"{op:11}{ours:>12,.0f} r/s{base:>12,.0f} r/s{ours / base:>7.2f}x"
            f"   {goal}  {'ok' if ok else 'MISSED'}"
        )
    # Per CPU-second: what the same work costs regardless of other processes' load.
    for op in ("append", "read"):
        ours, base = (args.records / clocks[f"{who} {op}"].cpu for who in ("log", "sqlite"))
        print(f"{op + '/cpu':11}{ours:>12,.0f} r/s{base:>12,.0f} r/s{ours / base:>7.2f}x")
    figures = Figures("log_throughput")  # baseline: plain SQLite doing the same writes and reads
    for op in ("append", "read"):
        for clock, unit in (("wall", "records_per_s"), ("cpu", "records_per_cpu_s")):
            ours, base = (
                args.records / getattr(clocks[f"{who} {op}"], clock) for who in ("log", "sqlite")
            )
            figures.add(f"{op}_{unit}", ours, base)
    figures.emit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        clocks = bench(Path(tmp), args)
    report(clocks, args)


if __name__ == "__main__":
    main()
