"""1 MB TOASTed text values from a real PostgreSQL 15 through the log into the embedded sinks
(DuckDB in current and history modes, under the default ``memory_limit``; the Tantivy search
index), read in batches as large as a pipeline's ``batch_bytes`` may ask (256 MiB: every value
in one read): each sink ends equal to the table, after inserts and then updates that leave the
TOASTed value unchanged (the source fills it in).

Before the DuckDB sink bounded its transactions by bytes, a read of 150 MB of values, staged as
one document, stopped it with ``Out of Memory Error: failed to allocate data of size 256.0 MiB``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
import structlog

from cdc.contracts.sink import Sink, SinkContext
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.testing import wait_until
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig
from sinks.duckdb.config import MEMORY_LIMIT
from sinks.search.config import SearchSinkConfig
from sinks.search.reader import read_rows
from sinks.search.sink import SearchSink
from tests.integration.pg_source_kit import PIPELINE, Harness, harness, query, sql

ROWS = 150
VALUE = 1_000_000  # bytes a row: incompressible md5 text, stored out of line (TOASTed)
FILL = f"""INSERT INTO big SELECT g, 0,
    (SELECT left(string_agg(md5(g::text || '.' || i), ''), {VALUE})
     FROM generate_series(1, {VALUE // 32 + 1}) i)
    FROM generate_series(%s::int, %s) g"""
TOPIC = f"{PIPELINE}.public.big"
READ_BYTES = 256 * 1024 * 1024  # a pipeline's batch_bytes may be up to 1 GiB


def _table(dsn: str) -> dict[int, tuple[int, str]]:
    """``id -> (n, md5 of payload)``: what every sink must hold."""
    rows = query(dsn, "SELECT id, n, md5(payload), length(payload) FROM big")
    assert all(length == VALUE for *_, length in rows)
    return {i: (n, digest) for i, n, digest, _ in rows}


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def _stream(h: Harness, commits: int) -> None:
    """Step until the source committed ``commits`` transactions, keeping no event (400 MB)."""
    deadline = time.monotonic() + 180
    while len(h.commits) < commits:
        assert time.monotonic() < deadline, f"{len(h.commits)} of {commits} transactions"
        h.step(timeout_s=1.0)
        h.events.clear()


def _apply(h: Harness, name: str, make: Callable[[SinkContext], Sink], records: int) -> None:
    """Run a sink task over the topic until ``records`` are committed; fail on its error."""
    context = SinkContext(
        PIPELINE, name, [("public", "big")], SchemaCatalog(h.log, PIPELINE), structlog.get_logger()
    )
    stop, failed = threading.Event(), []

    def run() -> None:
        try:
            task.run()
        except BaseException as exc:
            failed.append(exc)

    task = SinkTask(
        PIPELINE, name, h.log, lambda: make(context), [TOPIC], stop, structlog.get_logger(),
        max_records=2000, max_bytes=READ_BYTES,
    )  # fmt: skip
    thread = threading.Thread(target=run)
    thread.start()
    try:

        def caught_up() -> bool:
            assert not failed, failed
            return sum(h.log.committed_offsets(group_name(PIPELINE, name)).values()) >= records

        wait_until(caught_up, 300, 0.1, describe=f"{name} to catch up")
    finally:
        stop.set()
        thread.join(60)
    assert not failed, failed


def _duckdb(path: Path, sql_text: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql_text).fetchall()


# What is version-dependent here, the unchanged TOASTed value the source fills in, is pgcore in
# test_pg_source_toast.py; this test is about the sinks, so it runs once, on 15 (about 110 s).
@pytest.mark.pgany
def test_the_embedded_sinks_hold_a_table_of_1mb_values(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE big (id int PRIMARY KEY, n int, payload text)")
    with harness(pg_db, tmp_path / "log", ["public.big"]) as h:
        h.open()
        for low in range(1, ROWS + 1, 50):  # 50 MB a transaction
            sql(pg_db, FILL, params=(low, low + 49))
        sql(pg_db, "UPDATE big SET n = n + 1")  # the value unchanged: filled in by the source
        _stream(h, ROWS // 50 + 1)
        table = _table(pg_db)
        for mode in ("current", "history"):
            _check_duckdb(h, tmp_path / f"{mode}.duckdb", mode, table)
        _check_search(h, tmp_path / "search", table)


def _check_duckdb(h: Harness, path: Path, mode: str, table: dict[int, tuple[int, str]]) -> None:
    config = DuckDBSinkConfig(name=mode, path=str(path), mode=mode)  # type: ignore[arg-type]
    assert config.memory_limit == MEMORY_LIMIT
    _apply(h, mode, lambda context: DuckDBSink(config, context), 2 * ROWS)
    current = _duckdb(path, "SELECT id, n, md5(payload) FROM public.big")
    assert {i: (n, digest) for i, n, digest in current} == table, mode
    if mode == "history":
        versions = _duckdb(
            path,
            "SELECT id, n, md5(payload), valid_to IS NULL FROM public.big__history ORDER BY id, n",
        )
        expected = [(i, n, d, n == 1) for i, (_, d) in sorted(table.items()) for n in (0, 1)]
        assert versions == expected


def _check_search(h: Harness, path: Path, table: dict[int, tuple[int, str]]) -> None:
    config = SearchSinkConfig(name="search", path=str(path))
    _apply(h, "search", lambda context: SearchSink(config, context), 2 * ROWS)
    rows = {
        key["id"]: (
            row["n"],
            hashlib.md5(row["payload"].encode(), usedforsecurity=False).hexdigest(),
        )
        for key, row in read_rows(config, "public", "big")
    }
    assert rows == table
