"""The sink contract held by the DuckDB sink in history mode too: the conformance kit over a
DuckDB file whose sink keeps every version (``mode: history``), its current table read back.
Current mode runs the kit in ``test_duckdb_sink.py``. Also: what the kit found in history mode
(two resets within one second).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.events import Op
from cdc.contracts.sink import Sink, SinkContext
from cdc.log.base import TopicPartition
from cdc.testing.conformance import SinkConformance
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig, history, read_rows
from tests.integration.duckdb_kit import TOPIC, Harness, item


class TestDuckDBHistoryConformance(SinkConformance):
    @pytest.fixture(autouse=True)
    def _file(self, tmp_path: Path) -> None:
        self.path = tmp_path / "kit.duckdb"

    def make_sink(self, context: SinkContext) -> Sink:
        return DuckDBSink(
            DuckDBSinkConfig(name="kit", path=str(self.path), mode="history"), context
        )

    def current_rows(self) -> dict[int, dict[str, Any]]:
        if not self.path.exists():
            return {}
        return {key["id"]: row for key, row in read_rows(self.path, "public", "kit_items")}


def test_two_resets_in_one_second_keep_both_histories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The kept table is named by the second of the reset: pin the clock so both resets fall in
    # one second, as a reset, a quick rebuild and a second reset can.
    monkeypatch.setattr(history.time, "strftime", lambda *_: "20240101000000")
    hist = Harness(tmp_path / "wh.duckdb", mode="history")
    partitions = [TopicPartition(TOPIC, 0)]
    hist.apply(item(Op.CREATE, 1, 10, "a", 1))
    hist.sink.reset_table(("public", "items"), partitions)
    hist.offsets.clear()
    hist.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    hist.sink.reset_table(("public", "items"), partitions)
    hist.sink.reset_table(("public", "items"), partitions)  # again: its history is empty
    kept = hist.sql(
        "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'items__history_before%' "
        "ORDER BY table_name"
    )
    assert kept == [
        ("items__history_before_reset_20240101000000",),
        ("items__history_before_reset_20240101000000_2",),
    ]
    counts = [hist.sql(f'SELECT count(*) FROM "public"."{name}"')[0][0] for (name,) in kept]
    assert counts == [1, 2]
    hist.sink.close()
