"""Typed positions: ``Lsn``'s text and codec, MongoDB's resume points, and the refusal of a
position that moves backwards (by the embedded log across a restart, and by each ``ack``)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
from bson.timestamp import Timestamp

from cdc.contracts.positions import (
    CommittedPositions,
    PositionedOffsets,
    PositionMovedBackwards,
    carried,
    position_in,
)
from cdc.contracts.source import SourceContext
from cdc.log.base import Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded.store import DB_FILE
from connectors.generator.source import Generated, GeneratorSource, GeneratorSourceConfig
from connectors.mongodb import positions as mongo
from connectors.mongodb.config import MongoSourceConfig
from connectors.mongodb.source import MongoSource
from connectors.postgres.lsn import Lsn
from connectors.postgres.replication.flush import Flush
from tests.unit.log_suite import Step, append


@pytest.mark.parametrize(
    ("text", "value"),
    [("0/0", 0), ("16/B374D848", 0x16_B374_D848), ("0/1E043F8", 0x1E0_43F8), ("1/0", 1 << 32)],
)
def test_lsn_parses_and_formats_like_pg_lsn(text: str, value: int) -> None:
    lsn = Lsn.parse(text)
    assert lsn == value and type(lsn) is Lsn
    assert str(lsn) == f"{lsn}" == text
    assert repr(lsn) == f"Lsn('{text}')"
    assert Lsn.parse(text.lower()) == Lsn.parse(f" {text} ") == lsn


def test_lsn_is_ordered_and_range_checked() -> None:
    assert Lsn.parse("0/FFFFFFFF") < Lsn.parse("1/0") < Lsn.parse("16/B374D848")
    assert max(Lsn(3), Lsn(7)) == 7
    with pytest.raises(ValueError, match="out of range"):
        Lsn(-1)
    with pytest.raises(ValueError, match="out of range"):
        Lsn(1 << 64)
    with pytest.raises(ValueError, match="invalid LSN"):
        Lsn.parse("0x1/0")


def test_lsn_codec_round_trips_the_stored_offsets_byte_for_byte() -> None:
    lsn = Lsn.parse("16/B374D848")
    offsets = lsn.to_offsets()
    # Today's format: plain JSON, as the stored state of earlier versions holds it.
    assert offsets == {"postgres": {"lsn": 0x16_B374_D848, "lsn_str": "16/B374D848"}}
    assert orjson.dumps(offsets["postgres"]) == b'{"lsn":97500059720,"lsn_str":"16/B374D848"}'
    assert carried(offsets) is lsn
    stored = orjson.loads(orjson.dumps(dict(offsets)))
    assert Lsn.from_offsets(stored) == lsn and type(Lsn.from_offsets(stored)) is Lsn
    assert Lsn.from_offsets({"postgres": {"lsn": 100}}) == 100  # written without lsn_str
    assert Lsn.from_offsets({}) is None
    assert Lsn.from_offsets({"postgres": {"lsn": "0/1"}}) is None
    assert Lsn.from_offsets({"postgres": {"lsn": True}}) is None


def test_the_embedded_log_refuses_a_backwards_position_after_a_restart(tmp_path: Path) -> None:
    topic = "p.public.t"
    with EmbeddedLog(tmp_path / "log") as log:
        log.ensure_topics([topic])
        append(log, [Record(topic, b"1", b"kept")], Lsn(200).to_offsets())
    with EmbeddedLog(tmp_path / "log") as log:
        txn = log.begin()
        txn.append([Record(topic, b"2", b"dropped")])
        behind = r"0/64 is before the stored position 0/C8"
        with pytest.raises(PositionMovedBackwards, match=behind):
            txn.store_offsets(Lsn(100).to_offsets())
        txn.abort()
        assert log.source_offsets() == {"postgres": {"lsn": 200, "lsn_str": "0/C8"}}
        assert [r.value for r in log.read(topic, 0, 0, 10)] == [b"kept"]


def test_committed_positions_count_only_committed_transactions() -> None:
    committed = CommittedPositions()
    committed.check(Step(5), lambda: False)  # aborted: 5 never counts
    committed.check(Step(3), lambda: True)
    committed.check(Step(3), lambda: True)  # equal is fine
    with pytest.raises(PositionMovedBackwards):
        committed.check(Step(2), lambda: True)


class _Repl:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)


def _flush(start: int) -> Flush:
    return Flush(_Repl(), start, 10.0, structlog.get_logger())  # type: ignore[arg-type]


def test_postgres_ack_refuses_a_backwards_position_and_accepts_an_equal_one() -> None:
    flush = _flush(start=500)
    flush.ack(Lsn(300).to_offsets())  # below the slot's start: accepted, the flush stays
    assert flush.acked == 500
    flush.ack({"postgres": {"lsn": 600, "lsn_str": "0/258"}})  # plain offsets decode too
    flush.ack(Lsn(600).to_offsets())
    assert flush.acked == 600
    behind = r"0/257 is before the acknowledged position 0/258"
    with pytest.raises(PositionMovedBackwards, match=behind):
        flush.ack(Lsn(599).to_offsets())
    assert flush.acked == 600
    flush.ack({"other": 1})  # no position: nothing to do


def _mongo_source() -> MongoSource:
    config = MongoSourceConfig.model_validate(
        {"type": "mongodb", "dsn": "mongodb://localhost:1/?replicaSet=rs", "tables": ["db.c"]}
    )
    context = SourceContext(pipeline="p", log=None, logger=structlog.get_logger())  # type: ignore[arg-type]
    return MongoSource(config, context)


def _mongo_offsets(**times: int) -> PositionedOffsets:
    streams = {sid: mongo.StreamPoint.of(None, when) for sid, when in times.items()}
    return mongo.MongoPosition(streams).to_offsets({"captured": ["db.c"]})


def test_mongodb_ack_refuses_a_stream_moving_back_and_accepts_equal_points() -> None:
    source = _mongo_source()
    source.ack(_mongo_offsets(**{"db.c": 10 << 32}))
    source.ack(_mongo_offsets(**{"db.c": 10 << 32, "db": 1}))  # a new stream: nothing to compare
    source.ack(orjson.loads(orjson.dumps(dict(_mongo_offsets(**{"db.c": 11 << 32})))))
    with pytest.raises(PositionMovedBackwards, match=r"db\.c=42949672960"):
        source.ack(_mongo_offsets(**{"db.c": 10 << 32}))


def test_mongodb_stream_points_keep_the_stored_format() -> None:
    token = {"_data": "8200000001000000022B0229296E04"}
    entry = mongo.stream_entry(token, None)
    assert entry == {
        "resume_token": {"_data": "8200000001000000022B0229296E04"},
        "start_after": False,
        "cluster_time": (1 << 32) | 2,
        "at": "1970-01-01T00:00:01Z",
    }
    assert list(entry) == ["resume_token", "start_after", "cluster_time", "at"]
    point = mongo.StreamPoint.from_entry(entry)
    assert point.to_entry() == entry
    assert mongo.StreamPoint.from_entry({"resume_token": None, "start_after": False}) == (
        mongo.StreamPoint(None, False, None)
    )
    assert mongo.stream_entry(None, None) == {
        "resume_token": None,
        "start_after": False,
        "cluster_time": None,
    }
    block: dict[str, Any] = {"streams": {"db.c": entry}, "captured": ["db.c"]}
    position = mongo.MongoPosition.from_offsets({"mongodb": block})
    assert position is not None
    assert position.to_offsets(block) == {"mongodb": block}
    assert mongo.position(Timestamp(1, 2)) == point.cluster_time
    assert mongo.MongoPosition.from_offsets({"mongodb": {"streams": {}}}) is None


def test_mongodb_points_order_by_cluster_time_and_skip_unknown_times() -> None:
    early, late = mongo.StreamPoint(None, False, 1), mongo.StreamPoint(None, False, 2)
    unknown = mongo.StreamPoint({"_data": "zz"}, False, None)
    assert early < late and not late < early and not early < early
    assert not unknown < late and not late < unknown
    a = mongo.MongoPosition({"x": early, "y": late})
    b = mongo.MongoPosition({"x": late, "z": early})
    assert a < b and not b < a


def test_a_mongodb_stream_restarted_after_history_lost_is_not_behind_its_lost_point() -> None:
    """A stream started afresh (history lost) may get an earlier cluster time than the lost
    point (mongo-java-server does, within a second); its restart count orders it after."""
    lost, fresh, later = (mongo.StreamPoint(None, False, t) for t in (10, 5, 6))
    before = mongo.MongoPosition({"s": lost, "c": lost})
    restarted = mongo.MongoPosition({"s": fresh, "c": lost}, {"s": 1})
    assert not restarted < before and before < restarted
    assert mongo.MongoPosition({"s": fresh, "c": lost}, {"s": 1}) < mongo.MongoPosition(
        {"s": later, "c": lost}, {"s": 1}
    )
    block = restarted.to_offsets({"captured": ["db.c"]})["mongodb"]
    assert block["restarts"] == {"s": 1}
    assert mongo.MongoPosition.from_offsets({"mongodb": block}) == restarted
    unrestarted = mongo.MongoPosition({"s": lost}).to_offsets({})["mongodb"]
    assert "restarts" not in unrestarted  # stored states without a restart keep their format


def test_generator_positions_are_checked_and_keep_their_format() -> None:
    config = GeneratorSourceConfig.model_validate({"type": "generator", "tables": ["s.t"]})
    context = SourceContext(pipeline="p", log=None, logger=structlog.get_logger())  # type: ignore[arg-type]
    source = GeneratorSource(config, context)
    source.open({})
    batch = source.poll(10, 0.1)
    assert batch.commit_offsets == {"generator": {"next": 10}}
    source.ack(batch.commit_offsets)
    source.ack({"generator": {"next": 10}})
    with pytest.raises(PositionMovedBackwards, match="9 is before the acknowledged position 10"):
        source.ack(Generated(9).to_offsets())


def test_last_commit_is_stored_and_old_offsets_stay_readable() -> None:
    offsets = Lsn(200).to_offsets(180)
    assert offsets == {"postgres": {"lsn": 200, "lsn_str": "0/C8", "lsn_commit": 180}}
    assert Lsn.from_offsets(offsets) == 200 and Lsn.commit_from_offsets(offsets) == 180
    assert type(Lsn.commit_from_offsets(offsets)) is Lsn
    old = {"postgres": {"lsn": 200, "lsn_str": "0/C8"}}  # stored before lsn_commit was
    assert Lsn.from_offsets(old) == 200 and Lsn.commit_from_offsets(old) is None
    assert Lsn.commit_from_offsets({}) is None


def test_position_in_takes_the_carried_position_or_decodes_plain_offsets() -> None:
    lsn = Lsn(200)
    assert position_in(lsn.to_offsets(), Lsn) is lsn  # carried: not decoded again
    # Plain offsets (a third-party source's, or as the log reads them back) decode.
    plain = position_in({"postgres": {"lsn": 200}}, Lsn)
    assert plain == 200 and type(plain) is Lsn
    # Carrying another source's position: this type's is decoded from the items.
    both = PositionedOffsets({"postgres": {"lsn": 7}, "generator": {"next": 3}}, Generated(3))
    assert position_in(both, Lsn) == 7 and type(position_in(both, Lsn)) is Lsn
    assert position_in(both, Generated) is both.position
    assert position_in({"pos": 2}, Lsn) is None and carried({"pos": 2}) is None


def _stored_rows(directory: Path) -> list[tuple[str, bytes]]:
    with closing(sqlite3.connect(directory / DB_FILE)) as conn:
        return sorted(conn.execute("SELECT key, value FROM source_offsets").fetchall())


def test_offsets_carrying_a_position_store_the_same_bytes_as_plain_ones(tmp_path: Path) -> None:
    """A third-party source hands on a plain mapping; a typed one, the same items carrying its
    position: the log stores the same bytes for both."""
    typed = Lsn(200).to_offsets(180)
    plain = orjson.loads(orjson.dumps(dict(typed)))
    assert type(plain) is dict and plain == typed
    for name, offsets in (("typed", typed), ("plain", plain)):
        with EmbeddedLog(tmp_path / name) as log:
            log.ensure_topics(["p.public.t"])
            append(log, [Record("p.public.t", b"1", b"v")], offsets)
    assert _stored_rows(tmp_path / "typed") == _stored_rows(tmp_path / "plain")
    assert _stored_rows(tmp_path / "plain") == [
        ("postgres", b'{"lsn":200,"lsn_str":"0/C8","lsn_commit":180}')
    ]
