"""The consistent source position the Iceberg sink stores in its namespace's properties
(:class:`cdc.contracts.sink.PositionedSink`, :mod:`sinks.iceberg.position`), against a real
pyiceberg SQL catalog (SQLite) and a local warehouse.

A flush commits its tables one after another, so the position is written only once every
table's commit succeeded; it waits while changes before it are buffered; it is read back by
the plugin's ``read_consistent_position`` (what ``cdc status`` reads); a table reset forgets
it, and the other sinks' positions in the namespace are kept.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import ForbiddenError

from cdc.contracts.errors import SinkFatal, SinkUnavailable
from cdc.contracts.events import ChangeEvent, Op
from cdc.contracts.sink import SinkContext
from cdc.log.base import TopicPartition
from cdc.support.logging import get_logger
from sinks.iceberg import IcebergSink, IcebergSinkConfig
from sinks.iceberg.doctor import doctor
from sinks.iceberg.plugin import IcebergSinkPlugin
from sinks.iceberg.sink import open_catalog
from tests.integration.duckdb_kit import PIPELINE, event, item
from tests.integration.test_iceberg_sink import ITEMS, Lake, lake_config

BOTH = [("public", "items"), ("public", "other")]


def other(op: Op, key: int, pos: int, name: str = "o") -> ChangeEvent:
    """A change of ``public.other``."""
    return event(op, {"id": key}, {"id": key, "name": name, "qty": key}, pos, table="other")


class Positions(Lake):
    """A lake of two tables; ``sink(...)`` opens a sink of the catalog with its own tables."""

    def __init__(self, root: Path, interval_s: float = 0) -> None:
        self.interval_s = interval_s
        super().__init__(root)
        self.schemas.publish("other", *ITEMS)
        self.schemas.publish("third", *ITEMS)
        self.sink.close()
        self.sink = self.open_sink()

    def open_sink(self, name: str = "lake", tables: list[tuple[str, str]] = BOTH) -> IcebergSink:
        config = self.named(name)
        context = SinkContext(PIPELINE, name, tables, self.schemas, get_logger())
        sink = IcebergSink(config, context)
        sink.open()
        return sink

    def named(self, name: str) -> IcebergSinkConfig:
        return self.config.model_copy(update={"name": name, "commit_interval_s": self.interval_s})

    def stored(self, name: str = "lake") -> str | None:
        return IcebergSinkPlugin.read_consistent_position(self.named(name), pipeline=PIPELINE)

    def hand(
        self, position: str | None, *events: ChangeEvent, sink: IcebergSink | None = None
    ) -> None:
        """As the runner: the position, then the batch written and flushed."""
        target = sink or self.sink
        if position is not None:
            target.set_consistent_position(position)
        target.write(self.records(*events))
        target.flush()


@pytest.fixture
def positions(tmp_path: Path) -> Iterator[Positions]:
    lake = Positions(tmp_path)
    yield lake
    lake.sink.close()


def test_the_position_waits_for_every_buffered_change_and_is_read_back(tmp_path: Path) -> None:
    nowhere = lake_config(tmp_path / "never")
    assert IcebergSinkPlugin.read_consistent_position(nowhere, pipeline=PIPELINE) is None
    assert not (tmp_path / "never").exists()  # cdc status makes no catalog for a new sink
    lake = Positions(tmp_path / "lake", interval_s=3600)
    lake.sink.set_consistent_position("0/10")
    lake.sink.flush()  # alone, before the tables hold any offsets: nothing to stand beside
    assert lake.stored() is None
    # Partitions new to the tables: committed at once, the position after both commits.
    lake.hand("0/16B3748", item(Op.CREATE, 1, 10, "a", 1), other(Op.CREATE, 7, 11))
    assert lake.stored() == "0/16B3748"
    properties = open_catalog(lake.config).load_namespace_properties(PIPELINE)
    assert properties["cdc.consistent_position.shop.lake"] == "0/16B3748"
    # Buffered (inside the interval): the tables do not hold the batch, nor its position.
    lake.hand("0/1D4C7F8", item(Op.UPDATE, 1, 20, "a2", 2), other(Op.UPDATE, 7, 21, "o2"))
    assert lake.names() == {1: ("a", 1)}
    assert lake.stored() == "0/16B3748"
    lake.sink.set_consistent_position("0/2000000")  # idle: handed alone, changes buffered
    lake.sink.flush()
    assert lake.stored() == "0/16B3748"
    lake.sink.close()  # a clean stop commits the buffer, then stores the newest position held
    assert lake.names() == {1: ("a2", 2)}
    assert lake.stored() == "0/2000000"
    lake.sink = lake.open_sink()
    lake.sink.set_consistent_position("0/3000000")  # nothing buffered: stored alone at once
    lake.sink.flush()
    assert lake.stored() == "0/3000000"
    items, others = (TopicPartition(f"{PIPELINE}.public.{t}", 0) for t in ("items", "other"))
    assert lake.sink.stored_offsets() == {items: 2, others: 2}  # the position is no partition
    lake.sink.flush()  # what was handed is stored once
    lake.sink.close()


def test_a_table_commit_refused_mid_flush_keeps_the_older_position(
    positions: Positions,
) -> None:
    """The second table's commit is refused by the catalog for real: another writer of the
    table (a worker reading partition 1 of its topic; on Kafka, a paused old leader) committed
    on it after the sink read its version (pinned as ``test_iceberg_sink.py``'s two writers
    pin it). The first table's commit has landed; the position handed for the batch must not
    be stored, and the flush that fails forgets it."""
    lake = positions
    lake.hand("0/100", item(Op.CREATE, 1, 10, "a", 1), other(Op.CREATE, 7, 11))
    assert lake.stored() == "0/100"
    lake.sink._table(("public", "other"), lake.schemas.get("public", "other"))
    writer = lake.open_sink(tables=[("public", "other")])
    theirs = [replace(r, partition=1, offset=0) for r in lake.records(other(Op.CREATE, 8, 12))]
    writer.write(theirs)
    writer.flush()
    writer.close()
    batch = lake.records(item(Op.UPDATE, 1, 20, "a2", 2), other(Op.UPDATE, 7, 21, "o2"))
    lake.sink.set_consistent_position("0/200")
    lake.sink.write(batch)
    with pytest.raises(SinkUnavailable, match=r"committing public\.other: CommitFailedException"):
        lake.sink.flush()
    assert lake.names() == {1: ("a2", 2)}  # items committed, other not
    assert {k: r["name"] for k, r in lake.rows("other").items()} == {7: "o", 8: "o"}
    assert lake.stored() == "0/100"
    lake.sink.write(batch)  # the runner retries the batch; a flush that failed forgot 0/200
    lake.sink.flush()
    assert {k: r["name"] for k, r in lake.rows("other").items()} == {7: "o2", 8: "o"}
    assert lake.stored() == "0/100"
    lake.sink.set_consistent_position("0/200")  # handed again with the retry
    lake.sink.flush()
    assert lake.stored() == "0/200"


def test_a_position_the_catalog_refuses_is_kept_for_the_next_flush(
    positions: Positions,
) -> None:
    """The catalog refuses the property's write (a SQLite trigger on pyiceberg's namespace
    properties table: no other real refusal hits that write alone). The tables' commits
    landed, so the flush succeeds, and the next flush stores the position. ``cdc doctor``
    warns of it."""
    lake = positions
    lake.hand("0/100", item(Op.CREATE, 1, 10, "a", 1))
    catalog_db = sqlite3.connect(lake.config.catalog_properties()["uri"].removeprefix("sqlite:///"))
    refuse = (
        "CREATE TRIGGER refuse BEFORE INSERT ON iceberg_namespace_properties "
        "BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    with catalog_db:
        catalog_db.execute(refuse)
    lake.hand("0/200", item(Op.UPDATE, 1, 20, "a2", 2))
    assert lake.names() == {1: ("a2", 2)}
    assert lake.stored() == "0/100"
    assert [(c.level, c.name) for c in doctor(lake.config, PIPELINE)][-1] == ("warn", "position")
    with catalog_db:
        catalog_db.execute("DROP TRIGGER refuse")
    catalog_db.close()
    lake.sink.flush()
    assert lake.stored() == "0/200"


def test_a_table_reset_forgets_the_position_and_keeps_other_sinks(positions: Positions) -> None:
    lake = positions
    lake.interval_s = 3600
    lake.sink.close()
    lake.sink = lake.open_sink()
    third = lake.open_sink("lake3", [("public", "third")])
    try:
        made = event(Op.CREATE, {"id": 5}, {"id": 5, "name": "t", "qty": 5}, 9, table="third")
        lake.hand("0/90", made, sink=third)
        lake.hand("0/100", item(Op.CREATE, 1, 10, "a", 1), other(Op.CREATE, 7, 11))
        assert (lake.stored(), lake.stored("lake3")) == ("0/100", "0/90")
        lake.hand("0/200", item(Op.UPDATE, 1, 20, "a2", 2), other(Op.UPDATE, 7, 21, "o2"))
        items = TopicPartition(f"{PIPELINE}.public.items", 0)
        lake.sink.reset_table(("public", "items"), [items])
        assert lake.stored() is None  # items is read again from its start: nothing holds
        assert lake.stored("lake3") == "0/90"  # another sink's tables: untouched
        # The held 0/200 counted items' changes the reset dropped: the buffer of other,
        # committed now, does not store it.
        lake.sink.commit()
        assert {k: r["name"] for k, r in lake.rows("other").items()} == {7: "o2"}
        assert lake.stored() is None
        assert lake.sink.stored_offsets()[items] == 0
        # A position handed after the reset (the runner's, from offset 0) is stored again.
        lake.hand("0/300", item(Op.CREATE, 1, 20, "a2", 2))
        lake.sink.commit()
        assert (lake.stored(), lake.stored("lake3")) == ("0/300", "0/90")
    finally:
        third.close()


def test_a_reset_on_a_catalog_refusing_property_writes_goes_on_when_it_holds_no_position(
    positions: Positions,
) -> None:
    """A catalog that refuses the namespace's property writes (no update permission: SQLite
    triggers on pyiceberg's properties table stand for it) never held this sink's position, so
    a table reset goes on without removing it; one that holds a position it refuses to remove
    stops the reset, which would leave it claiming more than the tables hold."""
    lake = positions
    catalog_db = sqlite3.connect(lake.config.catalog_properties()["uri"].removeprefix("sqlite:///"))
    items = TopicPartition(f"{PIPELINE}.public.items", 0)
    with catalog_db:
        catalog_db.execute(
            "CREATE TRIGGER refuse_delete BEFORE DELETE ON iceberg_namespace_properties "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    lake.hand(None, item(Op.CREATE, 1, 10, "a", 1))
    assert lake.stored() is None

    def forbidden(*args: Any, **kwargs: Any) -> None:
        # Fault injection: a REST catalog without the permission refuses every property
        # update, a removal of a key it does not hold too; SQLite's triggers fire only on
        # rows, and there is none to remove.
        raise ForbiddenError("not allowed to update namespace properties")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SqlCatalog, "update_namespace_properties", forbidden)
        lake.sink.reset_table(("public", "items"), [items])  # nothing stored: it goes on
    assert lake.rows("items") == {} and lake.sink.stored_offsets()[items] == 0
    lake.hand("0/100", item(Op.CREATE, 2, 20, "b", 2))
    assert lake.stored() == "0/100"
    with pytest.raises((SinkUnavailable, SinkFatal)):
        lake.sink.reset_table(("public", "items"), [items])
    assert lake.stored() == "0/100"
    catalog_db.close()
