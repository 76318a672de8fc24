"""The sinks' schema catalog waits for a missing schema once per table, not at every batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc.contracts.schema import Column, TableSchema, schema_record
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.schemas import SchemaCatalog
from cdc.testing import ManualClock
from tests.unit.log_suite import append


def test_a_missing_schema_is_waited_for_once_then_found_when_published(tmp_path: Path) -> None:
    clock = ManualClock()
    with EmbeddedLog(tmp_path / "log") as log:
        log.ensure_topics(["p.__schemas"])
        catalog = SchemaCatalog(log, "p", wait_s=5.0, clock=clock)
        assert catalog.get("public", "t") is None
        waited = clock.now
        assert waited == pytest.approx(5.0) and max(clock.sleeps) == 0.05  # every 50 ms for 5 s
        assert catalog.get("public", "t") is None  # asked again: no second wait
        assert clock.now == waited
        columns = (Column("id", "bigint", key=True),)
        schema = TableSchema("postgresql", "public", "t", columns, 1)
        append(log, [schema_record("p", schema)])
        assert catalog.get("public", "t") == schema  # published later: found
