"""The slot's health that ``cdc status`` shows (``PostgresSourcePlugin.status``): from
PostgreSQL 17 with ``inactive_since`` and ``invalidation_reason``, before 17 without them (the
columns do not exist there, so they are not queried)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.testing import wait_until
from connectors.postgres.plugin import PostgresSourcePlugin
from tests.integration.pg_source_kit import PIPELINE, harness, query, sql


def _version(dsn: str) -> int:
    return int(query(dsn, "SHOW server_version_num")[0][0])


def _slot(h: Any) -> dict[str, Any]:
    status = PostgresSourcePlugin.status(h.config, PIPELINE, {})
    orjson.dumps(status)  # what cdc status --json prints
    return dict(status["slot"])


def _inactive(h: Any, timeout_s: float = 10.0) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []

    def inactive() -> bool:
        seen[:] = [_slot(h)]
        return not seen[0]["slot_active"]

    wait_until(inactive, timeout_s, 0.1, describe="the slot to be inactive after the source closed")
    return seen[0]


def test_slot_inactivity_is_shown_from_17_and_absent_before(pg_db: str, tmp_path: Path) -> None:
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    with harness(pg_db, tmp_path / "log", ["public.t"]) as h:
        h.open()
        h.step()
        active = _slot(h)
        before_close = datetime.now().astimezone()
        h.close()
        inactive = _inactive(h)
    assert active["slot_exists"] and active["slot_active"] and not inactive["slot_active"]
    if _version(pg_db) < 170000:
        for slot in (active, inactive):
            assert "inactive_since" not in slot and "invalidation_reason" not in slot
        return
    assert active["inactive_since"] is None and active["invalidation_reason"] is None
    since = datetime.fromisoformat(inactive["inactive_since"])
    assert before_close - timedelta(seconds=5) <= since <= datetime.now().astimezone()
    assert inactive["invalidation_reason"] is None


def test_an_invalidated_slot_shows_why_from_17(pg_db: str, tmp_path: Path) -> None:
    if _version(pg_db) < 170000:
        pytest.skip("pg_replication_slots.invalidation_reason needs PostgreSQL 17 or later")
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    with harness(pg_db, tmp_path / "log", ["public.t"]) as h:
        h.open()
        h.close()
        _inactive(h)
        # The server drops WAL the slot still needs once it holds more than this.
        sql(pg_db, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'", "SELECT pg_reload_conf()")
        try:
            for _ in range(4):
                sql(pg_db, "INSERT INTO t SELECT coalesce(max(id), 0) + 1 FROM t")
                sql(pg_db, "SELECT pg_switch_wal()")
            sql(pg_db, "CHECKPOINT")
            slot = _slot(h)
        finally:
            sql(pg_db, "ALTER SYSTEM RESET max_slot_wal_keep_size", "SELECT pg_reload_conf()")
    assert slot["wal_status"] == "lost"
    assert slot["invalidation_reason"] == "wal_removed"
