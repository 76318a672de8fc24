"""Unchanged TOASTed values are filled, never emitted as placeholders: from the previous image
in the log, from earlier in the same transaction, or by reading the row (flagged)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cdc.contracts.events import Op
from tests.integration.pg_source_kit import harness, query, sql

# 100 kB of md5 hex: barely compressible, so PostgreSQL stores it out of line (TOAST).
BIG = "(SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 3125) g)"


def _big(dsn: str, row_id: int) -> str:
    [(value,)] = query(dsn, "SELECT big FROM docs WHERE id = %s", (row_id,))
    return str(value)


@pytest.mark.pgcore
def test_unchanged_toast_filled_from_the_log(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE docs (id int PRIMARY KEY, title text, big text)")
    with harness(pg_db, tmp_path / "log", ["public.docs"]) as h:
        h.open()
        sql(pg_db, f"INSERT INTO docs VALUES (1, 't', {BIG})")
        h.collect(1)
        sql(pg_db, "UPDATE docs SET title = 't2' WHERE id = 1")
        _, update = h.collect(2)
        assert update.op == Op.UPDATE and update.after is not None
        assert len(update.after["big"]) == 100_000
        assert update.after["big"] == _big(pg_db, 1)
        assert "toast_fallback" not in update.source.extra


@pytest.mark.pgcore
def test_unchanged_toast_without_previous_image_reads_the_row(pg_db: str, tmp_path: Path) -> None:
    sql(
        pg_db,
        "CREATE TABLE docs (id int PRIMARY KEY, title text, big text)",
        f"INSERT INTO docs VALUES (1, 't', {BIG})",
    )
    with harness(pg_db, tmp_path / "log", ["public.docs"]) as h:
        h.open()
        sql(pg_db, "UPDATE docs SET title = 't2' WHERE id = 1")
        [update] = h.collect(1)
        assert update.after is not None and update.after["big"] == _big(pg_db, 1)
        assert update.source.extra["toast_fallback"] is True
        assert update.source.extra["toast_fallback_columns"] == ["big"]


@pytest.mark.pgcore
def test_unchanged_toast_after_a_change_in_the_same_transaction(pg_db: str, tmp_path: Path) -> None:
    sql(
        pg_db,
        "CREATE TABLE docs (id int PRIMARY KEY, title text, big text)",
        f"INSERT INTO docs VALUES (1, 't', {BIG})",
    )
    with harness(pg_db, tmp_path / "log", ["public.docs"]) as h:
        h.open()
        sql(pg_db, "UPDATE docs SET title = 't1' WHERE id = 1")  # fallback read puts it in the log
        h.collect(1)
        sql(
            pg_db,
            f"BEGIN; UPDATE docs SET big = {BIG} WHERE id = 1;"
            " UPDATE docs SET title = 't3' WHERE id = 1; COMMIT",
        )
        first, second = h.collect(3)[1:]
        assert first.after is not None and second.after is not None
        assert second.after["big"] == first.after["big"] == _big(pg_db, 1)
        assert "toast_fallback" not in second.source.extra


@pytest.mark.pgcore
def test_unchanged_toast_after_an_uncommitted_batch_of_the_same_transaction(
    pg_db: str, tmp_path: Path
) -> None:
    # The transaction is cut into batches of 10 events: when the last update arrives, the
    # batch with the first one is appended to the log but not committed. The log's committed
    # image is stale; the fill must come from the open transaction, without reading the row.
    sql(
        pg_db,
        "CREATE TABLE docs (id int PRIMARY KEY, title text, big text)",
        "CREATE TABLE filler (id int PRIMARY KEY)",
        f"INSERT INTO docs VALUES (1, 't', {BIG})",
    )
    with harness(pg_db, tmp_path / "log", ["public.docs", "public.filler"]) as h:
        h.open()
        sql(pg_db, "UPDATE docs SET title = 't1' WHERE id = 1")  # a fallback read: the log has it
        [first] = h.collect(1)
        assert first.after is not None
        stale = first.after["big"]
        sql(
            pg_db,
            f"BEGIN; UPDATE docs SET big = {BIG} WHERE id = 1;"
            " INSERT INTO filler SELECT generate_series(1, 50);"
            " UPDATE docs SET title = 't3' WHERE id = 1; COMMIT",
        )
        uncommitted_pieces = 0
        deadline = time.monotonic() + 30
        while len(h.events) < 53 or len(h.commits) < 2:
            assert time.monotonic() < deadline, f"{len(h.events)} events so far"
            if h.step(max_events=10) and not h.commits[1:]:
                uncommitted_pieces += 1
        assert uncommitted_pieces >= 5
        changed, last = h.events[1], h.events[-1]
        assert changed.after is not None and last.after is not None
        assert last.after["title"] == "t3"
        assert last.after["big"] == changed.after["big"] == _big(pg_db, 1) != stale
        assert "toast_fallback" not in last.source.extra
