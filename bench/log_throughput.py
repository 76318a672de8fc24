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
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded_store import INSERT_RECORD, SCHEMA, SELECT_RANGE, connect, now_ms

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
                "pos": [123_456_789 + i, 0],
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
            (1, 0, start + i, k, v, ts) for i, (k, v) in enumerate(zip(keys, values, strict=True))
        )
        self.conn.executemany(INSERT_RECORD, rows)
        self.conn.execute("COMMIT")
        self.offset += len(keys)

    def read(self, max_records: int) -> int:
        rows = self.conn.execute(SELECT_RANGE, (1, 0, self.position, max_records)).fetchall()
        self.position = rows[-1][0] + 1
        return len(rows)


def bench(tmp: Path, args: argparse.Namespace) -> tuple[tuple[float, float], tuple[float, float]]:
    """Rates of (log, baseline) for (append, read).

    The two run interleaved, batch by batch, so that load from other processes on a shared
    machine slows both alike and the ratios stay meaningful.
    """
    log = EmbeddedLog(tmp / "log", partitions=args.partitions)
    log.ensure_topics([TOPIC])
    base = Baseline(tmp / "baseline.sqlite3")
    spent = [0.0, 0.0, 0.0, 0.0]
    for number, (keys, values) in enumerate(batches(args.records, args.batch)):
        chunk = [Record(TOPIC, k, v) for k, v in zip(keys, values, strict=True)]
        started = time.perf_counter()
        with log.begin() as txn:
            txn.append(chunk)
            txn.store_offsets({"lsn": number})
        spent[0] += time.perf_counter() - started
        started = time.perf_counter()
        base.append(keys, values)
        spent[1] += time.perf_counter() - started
    consumer = log.consumer("bench", [TOPIC])
    read = [0, 0]
    while read[0] < args.records:
        started = time.perf_counter()
        read[0] += len(consumer.poll(args.batch, 1.0))
        spent[2] += time.perf_counter() - started
        started = time.perf_counter()
        read[1] += base.read(args.batch)
        spent[3] += time.perf_counter() - started
    log.close()
    base.conn.close()
    n = args.records
    return (n / spent[0], read[0] / spent[2]), (n / spent[1], read[1] / spent[3])


def report(ours: tuple[float, float], base: tuple[float, float], args: argparse.Namespace) -> None:
    size = len(key(0)) + len(value(0))
    print(
        f"{args.records:,} records of ~{size} bytes, {args.batch:,} per transaction, "
        f"partitions={args.partitions}, synchronous=FULL, SQLite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'':8}{'embedded log':>16}{'plain sqlite':>16}{'ratio':>8}   target")
    append_ok = ours[0] >= TARGET_APPEND and ours[0] / base[0] >= TARGET_RATIO
    read_ok = ours[1] >= TARGET_READ
    print(
        f"{'append':8}{ours[0]:>12,.0f} r/s{base[0]:>12,.0f} r/s{ours[0] / base[0]:>7.2f}x"
        f"   >= {TARGET_APPEND:,} r/s and >= {TARGET_RATIO}x  {'ok' if append_ok else 'MISSED'}"
    )
    print(
        f"{'read':8}{ours[1]:>12,.0f} r/s{base[1]:>12,.0f} r/s{ours[1] / base[1]:>7.2f}x"
        f"   >= {TARGET_READ:,} r/s  {'ok' if read_ok else 'MISSED'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        ours, base = bench(Path(tmp), args)
    report(ours, base, args)


if __name__ == "__main__":
    main()
