"""The sinks' schema catalog waits for a missing schema once per table, not at every batch."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cdc.contracts.schema import Column, TableSchema, schema_record
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.schemas import SchemaCatalog
from tests.unit.log_suite import append


def test_a_missing_schema_is_waited_for_once_then_found_when_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    real_sleep = time.sleep

    def counting_sleep(seconds: float) -> None:
        slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", counting_sleep)
    with EmbeddedLog(tmp_path / "log") as log:
        log.ensure_topics(["p.__schemas"])
        catalog = SchemaCatalog(log, "p", wait_s=0.2)
        assert catalog.get("public", "t") is None
        waited_first = len(slept)
        assert catalog.get("public", "t") is None  # asked again: no second wait
        assert len(slept) == waited_first > 0
        columns = (Column("id", "bigint", key=True),)
        schema = TableSchema("postgresql", "public", "t", columns, 1)
        append(log, [schema_record("p", schema)])
        assert catalog.get("public", "t") == schema  # published later: found
