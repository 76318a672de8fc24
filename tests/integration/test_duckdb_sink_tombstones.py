"""A tombstone read without its delete (compaction took the delete) is that delete, in the DuckDB
sink's history mode, on a routed topic and through a compacted embedded log: where the
conformance kit's check does not reach.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cdc.contracts.events import Op
from cdc.contracts.sink import Sink, SinkContext, SinkRecord
from cdc.testing.conformance import TOPIC as KIT_TOPIC
from cdc.testing.conformance import SinkConformance, change
from sinks.duckdb import DuckDBSink, DuckDBSinkConfig, read_rows
from tests.integration.duckdb_kit import PIPELINE, Harness, item, names


def _lone_tombstone(h: Harness, key: int, pos: int) -> SinkRecord:
    delete, tombstone = h.records(item(Op.DELETE, key, pos))
    assert tombstone.value is None and tombstone.pos == delete.pos
    return tombstone


def test_history_mode_records_a_lone_tombstone_as_the_delete_once(tmp_path: Path) -> None:
    h = Harness(tmp_path / "wh.duckdb", mode="history")
    h.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    h.write([_lone_tombstone(h, 1, 12)])
    assert names(h) == {2: ("b", 2)}
    versions = "SELECT op, __cdc_position, valid_to IS NULL FROM public.items__history WHERE id = 1"
    expected = [("c", 10, False), ("d", 12, False)]
    assert sorted(h.sql(versions)) == expected
    ordered = "SELECT valid_from <= valid_to FROM public.items__history WHERE id = 1 AND op = 'c'"
    (closed,) = h.sql(ordered)
    assert closed == (True,)  # the time it was applied closes the version, never before it
    h.write(h.records(*[item(Op.DELETE, 1, 12)] * 2))  # replays: nothing more
    assert sorted(h.sql(versions)) == expected
    # A delete and its tombstone apart in one batch (a replay of the delete between them):
    # one version of the delete.
    delete, tombstone = h.records(item(Op.DELETE, 2, 14))
    h.write([delete, *h.records(item(Op.UPDATE, 2, 13, "b2", 3)), tombstone])
    assert names(h) == {}
    deletes = "SELECT count(*) FROM public.items__history WHERE id = 2 AND op = 'd'"
    assert h.sql(deletes) == [(1,)]
    h.apply(item(Op.CREATE, 2, 16, "b3", 4))
    h.write([_lone_tombstone(h, 2, 15)])  # older than the row it meets: nothing
    assert names(h) == {2: ("b3", 4)}
    h.sink.close()


def test_a_tombstone_without_a_position_is_skipped(tmp_path: Path) -> None:
    h = Harness(tmp_path / "wh.duckdb")
    h.apply(item(Op.CREATE, 1, 10, "a", 1))
    h.write([dataclasses.replace(_lone_tombstone(h, 1, 12), pos=None)])  # written before 91bdba0
    assert names(h) == {1: ("a", 1)}
    h.sink.close()


def test_a_tombstone_deletes_from_its_topics_table(tmp_path: Path) -> None:
    # A route sends public.items to the topic of public.everything: a tombstone has no source
    # block, so its topic alone names its table.
    h = Harness(tmp_path / "wh.duckdb")
    routed = f"{PIPELINE}.public.everything"

    def to_routed(records: list[SinkRecord]) -> list[SinkRecord]:
        return [dataclasses.replace(r, topic=routed) for r in records]

    h.write(to_routed(h.records(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))))
    h.write(to_routed([_lone_tombstone(h, 1, 12)]))
    assert sorted(h.rows("everything")) == [2]
    h.sink.close()


class _CompactedLog(SinkConformance):
    """The kit's log and sink task, over a DuckDB sink (not collected: no ``Test`` prefix)."""

    def make_sink(self, context: SinkContext) -> Sink:
        return DuckDBSink(DuckDBSinkConfig(name="kit", path=str(self.path)), context)

    def current_rows(self) -> dict[int, dict[str, Any]]:
        return {key["id"]: row for key, row in read_rows(self.path, "public", "kit_items")}


def test_a_log_compacted_under_a_stopped_sink_still_deletes(tmp_path: Path) -> None:
    kit = _CompactedLog()
    kit.setup_kit(tmp_path)
    kit.path = tmp_path / "kit.duckdb"
    log = kit.log()
    kit.fill_log(log, [change(1, Op.CREATE, 10, "a", 1), change(2, Op.CREATE, 11, "b", 2)])
    kit._run_until_caught_up(log, end=2)
    kit.fill_log(log, [change(1, Op.DELETE, 12)])
    log.compact(now_ms=0)  # tombstones kept: they are younger than the retention
    kept = [(r.offset, r.value is None) for r in log.read(KIT_TOPIC, 0, 0, 10)]
    assert kept == [(1, False), (3, True)]  # the delete is gone, its tombstone stays
    kit._run_until_caught_up(log, end=4)
    assert kit.rows() == {2: ("b", 2)}
    log.close()
