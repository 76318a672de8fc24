"""The capture workload's ``tricky`` table through the real PostgreSQL source (the snapshot's
COPY path, then the stream) gives the ``after`` values Debezium 3.6.1 wrote for it
(``tests/debezium/expected``), under the readable defaults and under Debezium's own defaults;
compared as parsed JSON."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.debezium import workload as capture
from tests.integration.snapshot_kit import execute, pipeline
from tests.unit import debezium_workload as w


def _after(setting: str) -> dict[bytes, dict[str, Any]]:
    """Debezium's ``after`` of each workload row, by its record key's JSON."""
    return {
        orjson.dumps({"id": key[1], "region": key[2]}): after
        for key, after in w.expected_after(setting).items()
    }


@pytest.mark.pgcore
@pytest.mark.parametrize("setting", ["readable", "defaults"])
def test_tricky_rows_equal_debeziums(pg_db: str, tmp_path: Path, setting: str) -> None:
    execute(
        pg_db,
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
        "CREATE EXTENSION hstore",
        f"CREATE TABLE tricky ({capture.COLUMNS})",
        "ALTER TABLE tricky ALTER COLUMN c_toast SET STORAGE EXTERNAL",
        f"INSERT INTO tricky VALUES {capture.ROW_1}, {capture.ROW_4}, {capture.ROW_2}",
    )
    expected = _after(setting)
    with pipeline(pg_db, tmp_path / "log", ["public.tricky"], snapshot="initial") as p:
        p.context = dataclasses.replace(p.context, envelope=w.options(setting))
        p.start()
        p.wait(lambda: p.snapshot_done() and bool(p.sources) and p.sources[0].streaming)
        snapshot = p.topic_state("public.tricky")
        for statement in capture.STREAM[:2]:  # row 3 inserted, then updated
            execute(pg_db, statement.replace("{t}", "tricky"))
        updated = orjson.dumps({"id": 3, "region": "ap"})
        p.wait(lambda: (p.topic_state("public.tricky").get(updated) or {}).get("c_int4") == 42)
        streamed = p.topic_state("public.tricky")
    assert set(snapshot) == set(expected) - {updated}
    for key, theirs in expected.items():
        op = "r" if key in snapshot else "u"
        ours = (snapshot if key in snapshot else streamed)[key]
        assert list(ours) == list(theirs)
        for name, value in theirs.items():
            if name not in w.DEVIATIONS:
                assert w.equal(op, ours[name], value), (
                    f"{key!r} {name}: {ours[name]!r} != {value!r}"
                )
    assert snapshot[orjson.dumps({"id": 1, "region": "eu"})]["c_int_2d"] == [[1, 2], [3, 4]]
