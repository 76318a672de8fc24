"""Replication CopyBoth framing and LSN/time helpers, without a server."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from connectors.postgres.lsn import lsn_to_str, str_to_lsn
from connectors.postgres.pgoutput import Begin, ProtocolError, decode
from connectors.postgres.replication.protocol import (
    PG_EPOCH_UNIX_US,
    XLOG_HEADER_SIZE,
    PrimaryKeepalive,
    XLogData,
    now_pg_us,
    parse_copy_data,
    parse_keepalive,
    parse_xlog_data,
    pg_time_to_unix_ms,
    standby_status_update,
    unix_ms_to_pg_time,
    xlog_wal_start,
)

V1 = Path(__file__).parent / "data" / "pgoutput" / "v1.json"


def test_xlog_data_wraps_a_captured_pgoutput_message() -> None:
    lsn, _, hex_payload = json.loads(V1.read_text())["messages"][0]
    payload = bytes.fromhex(hex_payload)
    start = str_to_lsn(lsn)
    frame = b"w" + struct.pack("!QQq", start, start + 0x100, 849_000_000_000_000) + payload
    message = parse_copy_data(frame)
    assert isinstance(message, XLogData)
    assert (message.wal_start, message.wal_end, message.server_time_us) == (
        start,
        start + 0x100,
        849_000_000_000_000,
    )
    assert bytes(message.payload) == payload
    begin = decode(message.payload)
    assert isinstance(begin, Begin) and begin.final_lsn > start


def test_xlog_data_payload_is_a_view_not_a_copy() -> None:
    frame = bytearray(b"w" + bytes(24) + b"E")
    message = parse_xlog_data(frame)
    frame[-1] = ord("X")
    assert bytes(message.payload) == b"X"


def test_keepalive() -> None:
    frame = b"k" + struct.pack("!QqB", 0x16B374D848, 12_345, 1)
    assert parse_copy_data(frame) == PrimaryKeepalive(0x16B374D848, 12_345, True)
    frame = b"k" + struct.pack("!QqB", 7, -1, 0)
    assert parse_keepalive(memoryview(frame)) == PrimaryKeepalive(7, -1, False)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"", "empty"),
        (b"x123", "unknown replication CopyData tag 0x78"),
        (b"w" + bytes(23), "not an XLogData"),
        (b"k" + bytes(16), "not a primary keepalive"),
    ],
)
def test_bad_frames(frame: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_copy_data(frame)


def test_parsers_check_their_tag() -> None:
    with pytest.raises(ProtocolError):
        parse_xlog_data(b"k" + bytes(24))
    with pytest.raises(ProtocolError):
        parse_keepalive(b"w" + bytes(17))


def test_standby_status_update_bytes() -> None:
    update = standby_status_update(0x10, 0x0F, 0x0E, 123_456, reply_requested=True)
    assert update == (
        b"r"
        + bytes.fromhex("0000000000000010")
        + bytes.fromhex("000000000000000f")
        + bytes.fromhex("000000000000000e")
        + bytes.fromhex("000000000001e240")
        + b"\x01"
    )
    assert len(update) == 34
    assert standby_status_update(1, 1, 1, 0)[-1] == 0


def test_standby_status_update_defaults_to_now() -> None:
    before = now_pg_us()
    update = standby_status_update(1, 1, 1)
    (sent,) = struct.unpack_from("!q", update, 25)
    assert before <= sent <= now_pg_us()


def test_standby_status_update_rejects_bad_lsns() -> None:
    with pytest.raises(ValueError, match="flush LSN out of range"):
        standby_status_update(1, -1, 1, 0)
    with pytest.raises(ValueError, match="write LSN"):
        standby_status_update(1 << 64, 1, 1, 0)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0/0", 0),
        ("16/B374D848", 0x16_B374_D848),
        ("0/1234ABCD", 0x1234_ABCD),
        ("1/1", (1 << 32) + 1),
        ("0/1E043F8", 0x1E0_43F8),
        ("FFFFFFFF/FFFFFFFF", (1 << 64) - 1),
    ],
)
def test_lsn_round_trip(text: str, value: int) -> None:
    assert str_to_lsn(text) == value
    assert lsn_to_str(value) == text


def test_lsn_format_matches_the_server() -> None:
    # The slot function's lsn column is the server's own formatting.
    for lsn, _, _ in json.loads(V1.read_text())["messages"]:
        assert lsn_to_str(str_to_lsn(lsn)) == lsn
    assert lsn_to_str(1) == "0/1"
    assert str_to_lsn("0/1") == str_to_lsn("0/00000001") == str_to_lsn(" 0/1 ")
    assert str_to_lsn("16/b374d848") == 0x16_B374_D848


@pytest.mark.parametrize(
    "text", ["", "16", "/1", "1/", "G/1", "1/2/3", "123456789/0", "-1/0", "0x1/0", "1_0/0"]
)
def test_str_to_lsn_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid LSN"):
        str_to_lsn(text)


def test_lsn_to_str_rejects() -> None:
    with pytest.raises(ValueError):
        lsn_to_str(-1)
    with pytest.raises(ValueError):
        lsn_to_str(1 << 64)


def test_pg_time() -> None:
    assert PG_EPOCH_UNIX_US == 946_684_800 * 1_000_000
    assert pg_time_to_unix_ms(0) == 946_684_800_000
    assert pg_time_to_unix_ms(757_382_400_000_000) == 1_704_067_200_000  # 2024-01-01T00:00:00Z
    assert pg_time_to_unix_ms(1_999) == 946_684_800_001  # truncates to the millisecond
    assert pg_time_to_unix_ms(-1) == 946_684_799_999  # floors before 2000 too
    assert unix_ms_to_pg_time(1_704_067_200_000) == 757_382_400_000_000
    assert abs(pg_time_to_unix_ms(now_pg_us()) - time.time() * 1000) < 1000


def test_the_hot_loops_header_read_agrees_with_parse_xlog_data() -> None:
    frame = b"w" + struct.pack("!QQq", 0x16_B374_D848, 0x17_0000_0000, 12345) + b"Bpayload"
    parsed = parse_xlog_data(frame)
    assert xlog_wal_start(frame) == (parsed.wal_start,) == (0x16_B374_D848,)
    assert (parsed.wal_end, parsed.server_time_us) == (0x17_0000_0000, 12345)
    assert frame[XLOG_HEADER_SIZE:] == bytes(parsed.payload) == b"Bpayload"
