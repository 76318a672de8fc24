"""MongoDB's fence positions without a server: parsing what ``cdc status`` prints, how a
stored position compares with a fence's target (:func:`cdc.runtime.consistency.at_or_after`),
the cluster time a reply reports, and the streaming loop storing quiet streams' points."""

from __future__ import annotations

from typing import Any

import pytest
import structlog
from bson import Timestamp

from cdc.contracts.errors import SourceUnavailable
from cdc.runtime.consistency import at_or_after
from connectors.mongodb import MongoSourcePlugin
from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.fence import (
    ClusterTime,
    parse_position,
    reported_cluster_time,
)
from connectors.mongodb.fields import FieldTracker
from connectors.mongodb.plan import StreamSpec
from connectors.mongodb.positions import MongoPosition, StreamPoint
from connectors.mongodb.streaming import StreamSet
from tests.services.ports import free_port


def at(**times: int | None) -> MongoPosition:
    return MongoPosition(
        {sid.replace("_", "."): StreamPoint(None, False, t) for sid, t in times.items()}
    )


def test_the_status_form_parses_back_to_the_same_position() -> None:
    restarted = MongoPosition(
        {"shop.orders": StreamPoint(None, False, 7 << 32 | 3), "*": StreamPoint(None, False, None)},
        {"shop.orders": 2},
    )
    for position in (at(shop_orders=5), at(shop_orders=5, shop=9), restarted):
        text = str(position)
        parsed = parse_position(text)
        assert parsed == position and str(parsed) == text


def test_a_cluster_time_parses_from_a_timestamp_or_its_integer() -> None:
    target = parse_position("Timestamp(1796622473, 2)")
    assert target == ClusterTime(1796622473 << 32 | 2) == parse_position(str(1796622473 << 32 | 2))
    assert str(target) == "Timestamp(1796622473, 2)"  # what parse_position reads back
    assert ClusterTime.of(Timestamp(1796622473, 2)) == target


@pytest.mark.parametrize(
    "text",
    ["", "0/16B3748", "streams at cluster times ", "streams at cluster times a=x", "Timestamp(1)"],
)
def test_other_text_is_not_a_position(text: str) -> None:
    with pytest.raises(ValueError):
        parse_position(text)


def test_every_stream_must_reach_a_cluster_time() -> None:
    assert at_or_after(at(a=10, b=12), ClusterTime(10))
    assert not at_or_after(at(a=10, b=12), ClusterTime(11))  # stream a is behind
    assert not at_or_after(at(a=10, b=None), ClusterTime(1))  # unknown counts as behind
    assert not at_or_after(MongoPosition(), ClusterTime(1))
    assert not at_or_after(None, ClusterTime(1))


def test_a_stored_position_is_reached_stream_by_stream() -> None:
    target = parse_position("streams at cluster times a=10, b=20")
    assert at_or_after(at(a=10, b=20), target)
    assert not at_or_after(at(a=11, b=19), target)
    assert at_or_after(at(a=10, b=20, c=1), target)  # a stream the target lacks is not compared


def test_a_reply_reports_its_newest_cluster_time() -> None:
    reply = {"$clusterTime": {"clusterTime": Timestamp(5, 2)}, "operationTime": Timestamp(5, 1)}
    assert reported_cluster_time(reply) == ClusterTime(5 << 32 | 2)
    assert reported_cluster_time({"operationTime": Timestamp(6, 0)}) == ClusterTime(6 << 32)
    assert reported_cluster_time({"ok": 1.0}) is None  # mongo-java-server's ping


class QuietReader:
    """A reader whose events are listed and whose idle point moves on each empty read, as a
    real server's post-batch resume token does while the oplog moves."""

    def __init__(self, name: str, events: list[dict[str, Any]] | None = None) -> None:
        self.spec = StreamSpec(f"engineering.{name}", "engineering", name, (("engineering", name),))
        self._events = list(events or [])
        self.idle_reads = 0

    def next(self) -> dict[str, Any] | None:
        return self._events.pop(0) if self._events else None

    def push_back(self, change: dict[str, Any]) -> None:
        self._events.insert(0, change)

    def advance(self, change: dict[str, Any]) -> int:
        return 0

    def idle_point(self) -> bool:
        self.idle_reads += 1
        return True

    def close(self) -> None:
        return None


def _insert(n: int) -> dict[str, Any]:
    doc = {"_id": n}
    return {
        "_id": {"_data": f"{n:016X}"},
        "operationType": "insert",
        "clusterTime": Timestamp(1625478000, n),
        "ns": {"db": "engineering", "coll": "busy"},
        "fullDocument": doc,
        "documentKey": doc,
    }


def _streams(readers: list[QuietReader], idle_commit_s: float) -> StreamSet:
    return StreamSet(
        readers,  # type: ignore[arg-type]
        {("engineering", "busy"), ("engineering", "quiet")},
        FieldTracker("mongodb"),
        "fail",
        structlog.get_logger(),
        "mongodb://h/",
        idle_commit_s=idle_commit_s,
    )


def test_a_quiet_stream_adopts_its_idle_point_while_another_is_busy() -> None:
    busy, quiet = QuietReader("busy", [_insert(n) for n in range(1, 4)]), QuietReader("quiet")
    streams = _streams([busy, quiet], idle_commit_s=3600)
    collected = streams.poll(10)
    assert collected is not None and len(collected.events) == 3
    assert quiet.idle_reads == 1  # its point moves with the batch's offsets


def test_moved_idle_points_are_stored_alone_once_the_interval_passed() -> None:
    quiet = QuietReader("quiet")
    assert _streams([quiet], idle_commit_s=3600).poll(10) is None  # not yet due
    due = _streams([quiet], idle_commit_s=0.0)
    collected = due.poll(10)
    assert collected is not None and not collected.events  # offsets only


def test_an_unreachable_server_is_reported_without_its_password() -> None:
    dsn = f"mongodb://cdc:s3cret-pw@127.0.0.1:{free_port()}/"
    config = MongoSourceConfig.model_validate(
        {"dsn": dsn, "tables": ["shop.orders"], "server_selection_timeout_ms": 200}
    )
    with pytest.raises(SourceUnavailable, match="cannot read the cluster time") as caught:
        MongoSourcePlugin.current_position(config)
    assert "s3cret-pw" not in str(caught.value)
