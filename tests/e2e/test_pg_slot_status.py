"""``cdc status`` shows the slot's PostgreSQL 17 fields (``inactive_since``,
``invalidation_reason``), in its text and in ``--json``; before 17 it shows neither."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.e2e.cli_helpers import cdc, wait_for
from tests.integration.pg_source_kit import PIPELINE, harness, query, sql


def test_cdc_status_shows_since_when_the_slot_is_inactive(pg_db: str, tmp_path: Path) -> None:
    version = int(query(pg_db, "SHOW server_version_num")[0][0])
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY)")
    file = tmp_path / "status.yaml"
    file.write_text(
        f"version: 1\nname: {PIPELINE}\nsource:\n  type: postgres\n  dsn: ${{STATUS_DSN}}\n"
        "  tables: [public.t]\n  snapshot: never\nlog:\n  type: embedded\n"
    )
    env = {"STATUS_DSN": pg_db}
    with harness(pg_db, tmp_path / "log", ["public.t"]) as h:
        h.open()  # creates the pipeline's slot; closed below, so it is inactive
        h.close()
        active = "SELECT active FROM pg_replication_slots WHERE database = current_database()"
        wait_for(lambda: not query(pg_db, active)[0][0], 10)
        as_json = cdc("status", str(file), "--json", cwd=tmp_path, env=env)
        as_text = cdc("status", str(file), cwd=tmp_path, env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert as_text.returncode == 0, as_text.stderr
    slot = orjson.loads(as_json.stdout)["source"]["slot"]
    assert slot["slot_exists"]
    if version >= 170000:
        assert isinstance(slot["inactive_since"], str) and slot["invalidation_reason"] is None
        assert "inactive_since" in as_text.stdout
    else:
        assert "inactive_since" not in slot and "invalidation_reason" not in slot
        assert "inactive_since" not in as_text.stdout
