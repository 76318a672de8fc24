"""pgoutput decoding, on message bytes captured from PostgreSQL 15 (see data/pgoutput/capture.py).

``v1.json`` holds protocol 1 messages of the transactions listed in ``capture.V1_TRANSACTIONS``
(plus one with a replication origin); ``v2_stream.json`` protocol 2 with streamed transactions.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import struct
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from cdc.contracts.errors import SourceFatal
from connectors.postgres.lsn import str_to_lsn
from connectors.postgres.pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    Decoder,
    Delete,
    Insert,
    LogicalMessage,
    Origin,
    PgOutputMessage,
    ProtocolError,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    TypeInfo,
    Update,
    decode,
)

DATA = Path(__file__).parent / "data" / "pgoutput"


@cache
def _fixture(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _decoded(name: str) -> list[tuple[int, int, PgOutputMessage]]:
    """(row LSN, row xid, message) for each captured message, decoded with a Decoder."""
    decoder = Decoder()
    return [
        (str_to_lsn(lsn), xid, decoder(bytes.fromhex(data)))
        for lsn, xid, data in _fixture(name)["messages"]
    ]


def _transactions(name: str) -> list[list[PgOutputMessage]]:
    """Protocol 1 messages grouped Begin..Commit; a message outside a transaction alone."""
    groups: list[list[PgOutputMessage]] = []
    current: list[PgOutputMessage] | None = None
    for _, _, message in _decoded(name):
        if isinstance(message, Begin):
            current = [message]
        elif current is not None:
            current.append(message)
            if isinstance(message, Commit):
                groups.append(current)
                current = None
        else:
            groups.append([message])
    return groups


def _relations(messages: list[PgOutputMessage]) -> dict[str, Relation]:
    return {m.name: m for m in messages if isinstance(m, Relation)}


def _oid_of(table: str) -> int:
    for _, _, message in _decoded("v1.json"):
        if isinstance(message, Relation) and message.name == table:
            return message.oid
    raise AssertionError(table)


V1 = "v1.json"


def test_every_v1_message_kind_is_captured_and_decodes() -> None:
    kinds = Counter(type(message).__name__ for _, _, message in _decoded(V1))
    assert kinds == {
        "Begin": 12,
        "Commit": 12,
        "Relation": 9,
        "TypeInfo": 5,
        "Insert": 207,
        "Update": 4,
        "Delete": 2,
        "Truncate": 2,
        "LogicalMessage": 2,
        "Origin": 1,
    }


def test_begin_and_commit_agree_with_the_slot_rows() -> None:
    rows = _decoded(V1)
    begin_rows = [(lsn, xid, m) for lsn, xid, m in rows if isinstance(m, Begin)]
    commit_rows = [(lsn, xid, m) for lsn, xid, m in rows if isinstance(m, Commit)]
    assert len(begin_rows) == len(commit_rows) == 12
    for (_, xid, begin), (row_lsn, _, commit) in zip(begin_rows, commit_rows, strict=True):
        assert isinstance(begin, Begin) and isinstance(commit, Commit)
        assert begin.xid == xid
        assert begin.final_lsn == commit.commit_lsn
        assert begin.commit_ts_us == commit.commit_ts_us
        assert commit.flags == 0
        # The slot function reports a commit at the end of its record.
        assert commit.end_lsn == row_lsn
        assert commit.end_lsn > commit.commit_lsn


def test_first_insert_sends_types_relation_then_row() -> None:
    begin, mood, domain, relation, insert, commit = _transactions(V1)[0]
    assert isinstance(begin, Begin) and isinstance(commit, Commit)
    assert mood == TypeInfo(mood.oid, "public", "mood")  # type: ignore[union-attr]
    # For a domain the server names the base type, with '' for pg_catalog.
    assert isinstance(domain, TypeInfo)
    assert (domain.namespace, domain.name) == ("", "int4")
    assert isinstance(relation, Relation)
    assert (relation.namespace, relation.name, relation.replica_identity) == (
        "public",
        "customers",
        "d",
    )
    assert relation.xid is None
    assert relation.columns == (
        RelationColumn(True, "id", 23, -1),
        RelationColumn(False, "name", 25, -1),
        RelationColumn(False, "email", 1043, 104),  # varchar(100): 100 + VARHDRSZ
        RelationColumn(False, "balance", 1700, (12 << 16 | 2) + 4),
        RelationColumn(False, "mood", mood.oid, -1),  # type: ignore[union-attr]
        RelationColumn(False, "score", domain.oid, -1),
        RelationColumn(False, "tags", 1009, -1),
        RelationColumn(False, "created_at", 1184, -1),
    )
    assert insert == Insert(
        relation.oid,
        (
            "1",
            "Ada",
            "ada@example.com",
            "1234.50",
            "happy",
            "7",
            '{a,"b c",NULL}',
            "2024-01-02 03:04:05.123456+00",
        ),
    )


def test_update_without_and_with_key_change() -> None:
    _, plain, key_change, _ = _transactions(V1)[1]
    customers = _oid_of("customers")
    row = ("Ada L", "ada@example.com", "1234.50", None, "7", '{a,"b c",NULL}')
    stamp = "2024-01-02 03:04:05.123456+00"
    assert plain == Update(customers, None, None, ("1", *row, stamp))
    assert key_change == Update(customers, ("1",) + (None,) * 7, "K", ("2", *row, stamp))


def test_replica_identity_full_sends_old_rows() -> None:
    _, relation, insert, update, delete, _ = _transactions(V1)[2]
    assert isinstance(relation, Relation)
    assert relation.replica_identity == "f"
    assert all(column.is_key for column in relation.columns)  # every column identifies the row
    assert insert == Insert(relation.oid, ("10", "first", "1"))
    assert update == Update(relation.oid, ("10", "first", "1"), "O", ("10", "first", "5"))
    assert delete == Delete(relation.oid, ("10", "first", "5"), "O")


def test_delete_by_key() -> None:
    _, delete, _ = _transactions(V1)[3]
    assert delete == Delete(_oid_of("customers"), ("2",) + (None,) * 7, "K")


def test_unchanged_toast_value() -> None:
    _, _, insert, _ = _transactions(V1)[4]
    assert isinstance(insert, Insert)
    assert insert.new == ("1", "0123456789" * 1000, "1")
    _, update, _ = _transactions(V1)[5]
    assert update == Update(_oid_of("docs"), None, None, ("1", UNCHANGED, "2"))


def test_truncate_options() -> None:
    first, second = _transactions(V1)[6], _transactions(V1)[7]
    truncate_me, orders_full = _oid_of("truncate_me"), _oid_of("orders_full")
    assert first[-2] == Truncate((truncate_me, orders_full), cascade=True, restart_identity=True)
    assert second[-2] == Truncate((truncate_me,), cascade=False, restart_identity=False)


def test_logical_messages() -> None:
    *_, message, commit = _transactions(V1)[8]
    assert isinstance(commit, Commit)
    assert message == LogicalMessage(True, commit.commit_lsn, "cdc-test", b"hello, transactional")
    (standalone,) = _transactions(V1)[9]
    assert isinstance(standalone, LogicalMessage)
    assert (standalone.transactional, standalone.prefix, standalone.content) == (
        False,
        "cdc-test",
        b"\x00\xff\x01",
    )
    rows = [(lsn, xid) for lsn, xid, m in _decoded(V1) if m is standalone or m == standalone]
    assert rows == [(standalone.lsn, 0)]  # outside any transaction: xid 0


def test_origin_follows_begin() -> None:
    begin, origin, insert, commit = _transactions(V1)[10]
    assert origin == Origin(0x1234ABCD, "origin_a")
    # pg_replication_origin_xact_setup set the commit time to 2024-01-01T00:00:00Z.
    assert isinstance(begin, Begin) and isinstance(commit, Commit)
    assert begin.commit_ts_us == commit.commit_ts_us == 757_382_400_000_000
    assert insert == Insert(_oid_of("truncate_me"), ("2",))


def test_all_types_row_text() -> None:
    group = _transactions(V1)[11]
    types = [m for m in group if isinstance(m, TypeInfo)]
    assert [(t.namespace, t.name) for t in types] == [
        ("public", "mood"),
        ("", "int4"),
        ("public", "_mood"),
    ]
    first, second = (m for m in group if isinstance(m, Insert))
    names = [c.name for c in _relations(group)["all_types"].columns]
    values = dict(zip(names, first.new, strict=True))
    assert values["c_char"] == "ab   "  # bpchar keeps its padding
    assert values["c_varchar"] == "héllo"
    assert values["c_bytea"] == "\\x00ff10"
    assert values["c_timestamptz"] == "2024-01-01 21:34:05.123456+00"
    assert values["c_jsonb"] == '{"f": 0.1, "big": 123456789012345678901234567890}'
    assert values["c_text_arr"] == '{"a,b","c\\"d",NULL,"NULL",""}'
    assert values["c_box_arr"] == "{(1,1),(0,0);(3,3),(2,2)}"
    assert values["c_tsvector"] == "'cat' 'fat'"
    assert second.new[:5] == ("2", None, None, "-Infinity", "Infinity")


def test_binary_mode_values_are_bytes() -> None:
    decoder = Decoder()
    messages = [decoder(bytes.fromhex(d)) for _, _, d in _fixture("v1_binary.json")["messages"]]
    insert = next(m for m in messages if isinstance(m, Insert))
    assert insert.new[0] == struct.pack("!i", 1)  # int4 send format
    assert insert.new[1] == b"Ada"
    assert insert.new[4] == b"happy"  # enums send their label
    assert isinstance(insert.new[7], bytes) and len(insert.new[7]) == 8  # timestamptz: int64 µs


V2 = "v2_stream.json"


def test_v2_stream_kinds() -> None:
    kinds = Counter(type(message).__name__ for _, _, message in _decoded(V2))
    assert kinds["StreamStart"] == kinds["StreamStop"] == 6
    assert kinds["StreamCommit"] == 2
    assert kinds["StreamAbort"] == 2
    assert kinds["Begin"] == kinds["Commit"] == 2  # the small transactions are not streamed
    inserts = Counter((m.xid is not None) for _, _, m in _decoded(V2) if isinstance(m, Insert))
    # Streamed: 600 + 500 + 1 rows that commit, plus the blocks streamed before the
    # subtransaction's and the transaction's rollbacks (the rest of those is never sent).
    assert inserts == {True: 600 + 500 + 1 + 464 + 482, False: 2}


def test_v2_stream_blocks_carry_xids() -> None:
    rows = _decoded(V2)
    starts = [m for _, _, m in rows if isinstance(m, StreamStart)]
    assert [s.first_segment for s in starts] == [True, False, True, False, False, True]
    streaming_xid: int | None = None
    for _, _, message in rows:
        if isinstance(message, StreamStart):
            streaming_xid = message.xid
        elif isinstance(message, StreamStop):
            streaming_xid = None
        elif isinstance(message, Insert | Update | Delete | Truncate | Relation | TypeInfo):
            if streaming_xid is None:
                assert message.xid is None
            else:
                # A subtransaction's changes carry the subtransaction's xid.
                assert message.xid is not None and message.xid >= streaming_xid


def test_v2_streamed_commit_contents() -> None:
    rows = [m for _, _, m in _decoded(V2)]
    first_start = next(i for i, m in enumerate(rows) if isinstance(m, StreamStart))
    stop = next(i for i, m in enumerate(rows) if isinstance(m, StreamCommit))
    block = rows[first_start:stop]
    xid = block[0].xid  # type: ignore[union-attr]
    mood, relation = block[1], block[2]
    assert mood == TypeInfo(mood.oid, "public", "mood", xid)  # type: ignore[union-attr]
    assert isinstance(relation, Relation) and relation.xid == xid and relation.name == "stream_t"
    assert block[3] == Insert(relation.oid, ("1", None, "happy"), xid)
    assert Update(relation.oid, None, None, ("1", "updated", "happy"), xid) in block
    assert Delete(relation.oid, ("2", None, None), "K", xid) in block
    truncate = next(m for m in block if isinstance(m, Truncate))
    assert truncate.xid == xid and not truncate.cascade
    message = next(m for m in block if isinstance(m, LogicalMessage))
    assert (message.transactional, message.content, message.xid) == (
        True,
        b"inside a streamed transaction",
        xid,
    )
    commit = rows[stop]
    assert isinstance(commit, StreamCommit)
    assert (commit.xid, commit.flags) == (xid, 0)
    assert commit.commit_lsn == message.lsn  # the message is the last record before commit
    assert commit.end_lsn > commit.commit_lsn


def test_v2_stream_aborts() -> None:
    rows = [m for _, _, m in _decoded(V2)]
    sub, whole = (m for m in rows if isinstance(m, StreamAbort))
    starts = [m.xid for m in rows if isinstance(m, StreamStart)]
    assert sub.xid == starts[2] and sub.subxid != sub.xid  # ROLLBACK TO SAVEPOINT
    assert whole.xid == whole.subxid == starts[-1]  # the whole transaction rolled back
    rolled_back = [m for m in rows if isinstance(m, Insert) and m.xid == sub.subxid]
    assert {m.new[0] for m in rolled_back} <= {str(i) for i in range(20001, 20501)}


def test_streaming_flag_must_match() -> None:
    decoder = Decoder()
    streamed = next(
        raw
        for raw in (bytes.fromhex(d) for _, _, d in _fixture(V2)["messages"])
        if isinstance(decoder(raw), Insert) and decoder.streaming
    )
    assert isinstance(decode(streamed, streaming=True), Insert)
    # Without the flag the xid is read as the relation OID and the 'N' marker is missing.
    with pytest.raises(ProtocolError, match="expected 'N'"):
        decode(streamed, streaming=False)


def test_input_buffer_types() -> None:
    data = bytes.fromhex(_fixture(V1)["messages"][4][2])
    expected = decode(data)
    assert decode(memoryview(data)) == expected
    assert decode(bytearray(data)) == expected
    assert decode(memoryview(b"xx" + data)[2:]) == expected


def test_unknown_and_malformed_messages() -> None:
    with pytest.raises(ProtocolError, match="unknown pgoutput message tag 0x5a"):
        decode(b"Z")
    with pytest.raises(ProtocolError, match="two-phase"):
        decode(b"P" + bytes(30))
    with pytest.raises(ProtocolError, match="empty"):
        decode(b"")
    insert = bytes.fromhex(_fixture(V1)["messages"][4][2])
    with pytest.raises(ProtocolError, match="runs past the end"):
        decode(insert[:-3])
    with pytest.raises(ProtocolError, match="malformed pgoutput message 'I'"):
        decode(insert[:8])
    with pytest.raises(ProtocolError, match="tuple value kind 0x78"):
        decode(b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!H", 1) + b"x")
    with pytest.raises(ProtocolError, match="expected 'N'"):
        decode(b"I" + struct.pack("!I", 1) + b"Q")
    with pytest.raises(ProtocolError, match="malformed"):
        decode(b"O" + bytes(8) + b"no terminator")
    assert issubclass(ProtocolError, SourceFatal)


def test_decodes_synthetic_messages_of_every_layout() -> None:
    tuple_data = struct.pack("!H", 2) + b"t" + struct.pack("!I", 3) + b"abc" + b"u"
    assert decode(b"R" + struct.pack("!I", 7) + b"\x00t\x00n" + struct.pack("!H", 0)) == Relation(
        7, "", "t", "n", ()
    )
    assert decode(b"D" + struct.pack("!II", 9, 7) + b"K" + tuple_data, streaming=True) == Delete(
        7, ("abc", UNCHANGED), "K", 9
    )
    assert decode(b"E") is decode(b"E") == StreamStop()
    assert decode(b"S" + struct.pack("!IB", 5, 0)) == StreamStart(5, False)
    # Protocol 4's streaming = parallel appends the abort LSN and time; before, they are None.
    assert decode(b"A" + struct.pack("!IIQq", 5, 6, 1, 2)) == StreamAbort(5, 6, 1, 2)
    assert decode(b"A" + struct.pack("!II", 5, 6)) == StreamAbort(5, 6, None, None)
    with pytest.raises(ProtocolError, match="stream abort message of 13 bytes"):
        decode(b"A" + struct.pack("!III", 5, 6, 1))


def test_unchanged_sentinel() -> None:
    assert repr(UNCHANGED) == "UNCHANGED"
    assert pickle.loads(pickle.dumps(UNCHANGED)) is UNCHANGED


def test_decoder_tracks_stream_blocks() -> None:
    decoder = Decoder()
    insert = b"I" + struct.pack("!II", 42, 7) + b"N" + struct.pack("!H", 0)
    decoder(b"S" + struct.pack("!IB", 42, 1))
    assert decoder.streaming
    assert decoder(insert) == Insert(7, (), 42)
    decoder(b"E")
    assert not decoder.streaming


def test_fast_built_insert_is_a_normal_frozen_insert() -> None:
    data = b"I" + struct.pack("!I", 7) + b"N" + struct.pack("!H", 1) + b"n"
    fast = decode(data)
    assert fast == Insert(7, (None,)) and hash(fast) == hash(Insert(7, (None,)))
    assert repr(fast) == "Insert(relation_oid=7, new=(None,), xid=None)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.relation_oid = 8  # type: ignore[misc]
