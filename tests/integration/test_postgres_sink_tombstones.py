"""A tombstone read without its delete (compaction took the delete) is that delete, in the
PostgreSQL sink's history mode and on a routed topic, against a real PostgreSQL server: where
the conformance kit's check does not reach.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from cdc.contracts.events import Op
from cdc.contracts.schema import Column
from cdc.contracts.sink import SinkRecord
from tests.integration.duckdb_kit import PIPELINE, item
from tests.integration.postgres_sink_kit import Harness


@pytest.fixture
def wh(pg_db: str) -> Iterator[Harness]:
    harness = Harness(pg_db, mode="history")
    yield harness
    harness.close()


def _lone_tombstone(h: Harness, key: int, pos: int) -> SinkRecord:
    delete, tombstone = h.records(item(Op.DELETE, key, pos))
    assert tombstone.value is None and tombstone.pos == delete.pos
    return tombstone


def test_history_mode_records_a_lone_tombstone_as_the_delete_once(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))
    wh.write([_lone_tombstone(wh, 1, 12)])
    assert wh.names() == {2: ("b", 2)}
    versions = (
        "SELECT op, _cdc_pos, valid_to IS NULL, valid_from <= valid_to "
        "FROM replica.items__history WHERE id = %s ORDER BY _cdc_pos"
    )
    expected = [("c", 10, False, True), ("d", 12, False, True)]
    assert wh.sql(versions, [1]) == expected
    wh.apply(item(Op.DELETE, 1, 12), item(Op.DELETE, 1, 12))  # replays: nothing more
    assert wh.sql(versions, [1]) == expected
    # A delete and its tombstone apart in one batch: one version of the delete.
    delete, tombstone = wh.records(item(Op.DELETE, 2, 14))
    wh.write([delete, *wh.records(item(Op.UPDATE, 2, 13, "b2", 3)), tombstone])
    assert wh.names() == {}
    assert [v[:2] for v in wh.sql(versions, [2])] == [("c", 11), ("u", 13), ("d", 14)]
    wh.apply(item(Op.CREATE, 2, 16, "b3", 4))
    wh.write([_lone_tombstone(wh, 2, 15)])  # older than the row it meets: nothing
    assert wh.names() == {2: ("b3", 4)}


def test_a_tombstone_without_a_position_is_skipped(wh: Harness) -> None:
    wh.apply(item(Op.CREATE, 1, 10, "a", 1))
    wh.write([dataclasses.replace(_lone_tombstone(wh, 1, 12), pos=None)])  # before 91bdba0
    assert wh.names() == {1: ("a", 1)}


def test_a_tombstone_deletes_from_its_topics_table(pg_db: str) -> None:
    # A route sends public.items to the topic of public.everything: a tombstone has no source
    # block, so its topic alone names its table.
    h = Harness(pg_db)
    h.schemas.publish(
        "everything",
        Column("id", "bigint", key=True, nullable=False),
        Column("name", "text"),
        Column("qty", "integer"),
    )
    h.reopen()
    routed = f"{PIPELINE}.public.everything"

    def to_routed(records: list[SinkRecord]) -> list[SinkRecord]:
        return [dataclasses.replace(r, topic=routed) for r in records]

    h.write(to_routed(h.records(item(Op.CREATE, 1, 10, "a", 1), item(Op.CREATE, 2, 11, "b", 2))))
    h.write(to_routed([_lone_tombstone(h, 1, 12)]))
    assert h.names("everything") == {2: ("b", 2)}
    h.close()
