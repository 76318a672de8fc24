"""The conformance kit run against the in-memory reference sink, which shows the kit can pass,
and a broken sink, which shows it can fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.sink import Sink, SinkContext
from cdc.testing.conformance import SinkConformance
from cdc.testing.memory_sink import MemorySink, MemoryStore


class TestMemorySink(SinkConformance):
    @pytest.fixture(autouse=True)
    def _store(self) -> None:
        self.store = MemoryStore()

    def make_sink(self, context: SinkContext) -> Sink:
        return MemorySink(self.store)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        return {row["id"]: row for row in self.store.rows.values()}


class NoGuardSink(MemorySink):
    """Forgets positions: a late replay overwrites newer data."""

    def _apply(self, record: Any) -> None:
        self._store.positions.clear()
        super()._apply(record)


def test_the_kit_catches_a_sink_without_a_position_guard(tmp_path: Path) -> None:
    class Broken(TestMemorySink):
        def make_sink(self, context: SinkContext) -> Sink:
            return NoGuardSink(self.store)

    kit = Broken()
    kit.store = MemoryStore()
    kit.setup_kit(tmp_path)
    with pytest.raises(AssertionError):
        kit.test_kit_older_change_after_newer_is_ignored()
