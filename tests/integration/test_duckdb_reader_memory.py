"""The DuckDB reader (``cdc verify``'s sink side) scans a table with a bounded buffer pool.

DuckDB's default buffer pool is 80% of the machine's memory, so a read-only scan kept every block
it read: about 6 MB a million rows of one text column, the 70 MB that ``cdc verify``'s peak RSS
grew from 1M to 10M rows. The reader's own instances now scan under ``SCAN_MEMORY_LIMIT``; a
vector larger than that (large values) resets the limit and resumes the scan without giving a
row twice. Real DuckDB files, written by the sink and then grown in bulk with DuckDB's own
``INSERT ... SELECT`` (a million rows through the sink would take minutes).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from cdc.contracts.events import Op
from sinks.duckdb import read_rows
from sinks.duckdb import reader as duckdb_reader
from tests.integration.duckdb_kit import Harness, item

ROWS = 1_500_000
#: Rows of a few bytes before the large ones: DuckDB reads a scan's row groups ahead (two
#: threads), so the large values' vector fails after some 200,000 rows were given.
SMALL = 400_000


def _grown(path: Path, rows: int, value: str) -> None:
    """The sink's ``items`` table (one row written by the sink) grown to ``rows`` in bulk."""
    harness = Harness(path)
    harness.apply(item(Op.CREATE, 0, 10, "seed", 1))
    harness.sink.close()
    with duckdb.connect(str(path)) as con:
        values = f"SELECT i, {value}, i % 1000, 10, 0 FROM range(1, {rows}) r(i)"
        con.execute(f"INSERT INTO public.items {values}")


def _cached_table_bytes(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute(
        "SELECT memory_usage_bytes FROM duckdb_memory() WHERE tag = 'BASE_TABLE'"
    ).fetchone()
    return 0 if row is None else int(row[0])


def test_a_scan_keeps_the_buffer_pool_under_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "wh.duckdb"
    _grown(path, ROWS, "md5(i::VARCHAR) || md5((i * 7)::VARCHAR)")
    limit = 16 * 1024 * 1024
    assert duckdb_reader.SCAN_MEMORY_LIMIT == "16MiB"
    with duckdb.connect(str(path), read_only=True) as unlimited:  # as the reader opened it before
        unlimited.execute("SELECT max(name), max(id) FROM public.items").fetchall()
        assert _cached_table_bytes(unlimited) > 2 * limit  # what a scan without a limit keeps
    with duckdb_reader.open_for_reading(path) as con:
        scan = duckdb_reader._scan(con, "SELECT max(name), max(id) FROM public.items")
        assert [row[1] for rows in scan for row in rows] == [ROWS - 1]
        assert _cached_table_bytes(con) <= limit
        default = con.execute("SELECT current_setting('memory_limit')").fetchone()
        assert default is not None and default[0] != "16.0 MiB"  # the limit is the scan's only


def test_a_file_whose_log_holds_large_values_opens_and_scans(tmp_path: Path) -> None:
    """DuckDB replays the write-ahead log at the open: a batch of large values there needs more
    than the scan's limit, so the limit is set for the scan, not at the open."""
    path = tmp_path / "wh.duckdb"
    _grown(path, 1, "''")
    writer = (
        "import duckdb, os, sys\n"
        "con = duckdb.connect(sys.argv[1])\n"
        "con.execute(\"SET checkpoint_threshold = '10GB'\")\n"
        "con.execute(\"INSERT INTO public.items SELECT i, repeat('x', 1048576), 0, 10, 0 "
        'FROM range(1, 21) r(i)")\n'
        "os._exit(0)\n"  # no checkpoint at the close: the rows stay in the log
    )
    subprocess.run([sys.executable, "-c", writer, str(path)], check=True, timeout=60)
    assert path.with_name(path.name + ".wal").stat().st_size > 20 * 1024 * 1024
    rows = {key["id"]: row["name"] for key, row in read_rows(path, "public", "items")}
    assert sorted(rows) == list(range(21)) and len(rows[20]) == 1048576
    with duckdb_reader.open_for_reading(path) as con:  # cdc trace's read of one large row
        found = con.execute("SELECT name FROM public.items WHERE id = 7").fetchone()
        assert found is not None and len(found[0]) == 1048576


@pytest.mark.parametrize("batch", [2000, 7])
def test_large_values_reset_the_limit_and_resume_without_giving_a_row_twice(
    tmp_path: Path, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small rows, then 300 values of 1 MB: a vector of those needs a 512 MiB allocation, past
    # the scan's limit, after the small rows' vectors were given.
    path = tmp_path / "wh.duckdb"
    _grown(
        path,
        SMALL + 300,
        f"CASE WHEN i < {SMALL} THEN 'small' ELSE repeat(md5(i::VARCHAR), 32768) END",
    )
    limited = duckdb.connect(str(path), read_only=True, config={"memory_limit": "16MiB"})
    with limited as con, pytest.raises(duckdb.OutOfMemoryException):
        con.execute("SELECT * FROM public.items").fetchall()
    monkeypatch.setattr(duckdb_reader, "_BATCH", batch)
    rows = [(key["id"], row["name"]) for key, row in read_rows(path, "public", "items")]
    assert sorted(key for key, _ in rows) == list(range(SMALL + 300))  # each row once
    names = dict(rows)
    assert names[0] == "seed" and all(names[i] == "small" for i in range(1, SMALL))
    assert all(len(names[i]) == 32 * 32768 for i in range(SMALL, SMALL + 300))
