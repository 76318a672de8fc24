"""Kill -9 a writer in the middle of a long transaction: nothing of it survives, all else does.

The writer is a real process appending through :class:`EmbeddedLog`: a few fully committed
transactions, then one long transaction (hundreds of batches, far more data than SQLite's page
cache holds, so uncommitted pages spill to the WAL file) that it never gets to commit.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog

TOPIC = "shop.public.orders"
COMMITTED_TXNS = 3
BATCHES = 10
BATCH = 1_000
# The open transaction holds this many records (~300 bytes each) when the writer is killed.
OPEN_RECORDS = 400_000

WRITER = textwrap.dedent(
    f"""
    import sys
    from pathlib import Path
    from cdc.log.base import Record
    from cdc.log.embedded import EmbeddedLog

    log = EmbeddedLog(Path(sys.argv[1]), partitions=2)
    value = b"x" * 280

    def batch(txn, n):
        return [
            Record({TOPIC!r}, b'{{"id": %d}}' % (n * {BATCH} + i), b"%d:" % txn + value)
            for i in range({BATCH})
        ]

    for t in range({COMMITTED_TXNS}):
        with log.begin() as txn:
            for n in range({BATCHES}):
                txn.append(batch(t, n))
            txn.store_offsets({{"lsn": t, "slot": "s"}})
    print("committed", flush=True)
    txn = log.begin()
    txn.store_offsets({{"lsn": 999, "partial": True}})
    for n in range({OPEN_RECORDS // BATCH}):
        txn.append(batch(999, n))
    print("mid-transaction", flush=True)
    sys.stdin.read()  # wait to be killed, transaction still open
    """
)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_sigkill_mid_transaction_loses_exactly_the_open_transaction(tmp_path: Path) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    try:
        assert writer.stdout.readline().strip() == "committed"
        assert writer.stdout.readline().strip() == "mid-transaction"
        # ~120 MB of uncommitted records, yet the writer's memory stays bounded: SQLite spilled
        # them to the WAL file instead of holding them.
        assert rss_kib(writer.pid) < 110 * 1024
        os.kill(writer.pid, signal.SIGKILL)
        assert writer.wait(30) == -signal.SIGKILL
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert_only_the_committed_transactions_survive(tmp_path)


def assert_only_the_committed_transactions_survive(tmp_path: Path) -> None:
    """An intact database that holds the committed transactions, none of the open one, and
    takes appends after the crash."""
    conn = sqlite3.connect(tmp_path / "log.sqlite3")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    log = EmbeddedLog(tmp_path)
    assert log.source_offsets() == {"lsn": COMMITTED_TXNS - 1, "slot": "s"}
    total = COMMITTED_TXNS * BATCHES * BATCH
    records = [r for p in (0, 1) for r in log.read(TOPIC, p, 0, total + 1)]
    assert len(records) == total
    assert not any((r.value or b"").startswith(b"999:") for r in records)
    ends = log.end_offsets(TOPIC)
    assert sum(ends.values()) == total
    for partition, end in ends.items():
        assert [r.offset for r in records if r.partition == partition] == list(range(end))
    assert log.topics()[0].record_count == total

    with log.begin() as txn:
        txn.append([Record(TOPIC, b'{"id": 0}', b"after the crash")])
    partition = log.partition_for(TOPIC, b'{"id": 0}')
    assert log.read(TOPIC, partition, ends[partition], 10)[0].value == b"after the crash"
    log.close()
