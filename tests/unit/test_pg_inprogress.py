"""The spool of streamed in-progress transactions (connectors.postgres.replication.inprogress),
fed the messages a server streams: blocks of two interleaved transactions, a rolled-back
subtransaction, a whole abort with and without protocol 4's abort position, and the commit."""

from __future__ import annotations

import struct

import structlog
from structlog.testing import capture_logs

from connectors.postgres import pgoutput as pg
from connectors.postgres.replication.inprogress import StreamedTransactions

TOP, SUB, OTHER = 700, 701, 800


def _insert(xid: int, value: str) -> bytes:
    """A streamed Insert of one text value into relation 16384 by (sub)transaction ``xid``."""
    data = value.encode()
    return b"I" + struct.pack("!IIcHcI", xid, 16384, b"N", 1, b"t", len(data)) + data


def _feed(streams: StreamedTransactions, *raw: bytes) -> None:
    decoder = pg.Decoder()
    for lsn, data in enumerate(raw, start=1000):
        message = decoder(data)
        assert streams.accept(message, lsn, memoryview(data)), message


def _start(xid: int, first: bool = False) -> bytes:
    return b"S" + struct.pack("!IB", xid, int(first))


def _commit(xid: int) -> pg.StreamCommit:
    return pg.StreamCommit(xid, 0, 5000, 5008, 1234)


def test_a_committed_transaction_replays_without_its_rolled_back_subtransaction() -> None:
    streams = StreamedTransactions(structlog.get_logger())
    with capture_logs() as logs:
        _feed(
            streams,
            _start(TOP, first=True),
            _insert(TOP, "a"),
            _insert(SUB, "gone"),
            b"E",
            _start(OTHER, first=True),
            _insert(OTHER, "other"),
            b"E",
            _start(TOP),
            _insert(TOP, "b"),
            b"E",
            b"A" + struct.pack("!II", TOP, SUB),
        )
    assert [e["event"] for e in logs] == ["stream.subtransaction_aborted"]
    assert streams.open
    replayed = [message for message, _ in streams.replay(_commit(TOP))]
    assert replayed[0] == pg.Begin(5000, 1234, TOP)
    assert replayed[-1] == pg.Commit(0, 5000, 5008, 1234)
    inserts = [m for m in replayed if isinstance(m, pg.Insert)]
    assert [(m.xid, m.new) for m in inserts] == [(TOP, ("a",)), (TOP, ("b",))]
    assert streams.open  # OTHER is still in progress
    streams.close()
    assert not streams.open


def test_a_whole_abort_drops_the_spool_and_logs_where_protocol_4_says() -> None:
    streams = StreamedTransactions(structlog.get_logger())
    with capture_logs() as logs:
        _feed(
            streams,
            _start(TOP, first=True),
            _insert(TOP, "x" * 100),
            b"E",
            b"A" + struct.pack("!IIQq", TOP, TOP, 0x1_0000_0000, 777),  # parallel: with position
            _start(OTHER, first=True),
            _insert(OTHER, "y"),
            b"E",
            b"A" + struct.pack("!II", OTHER, OTHER),  # on: without
        )
    assert not streams.open
    aborted = [e for e in logs if e["event"] == "stream.aborted"]
    assert [(e["xid"], e["abort_lsn"], e["abort_ts_us"]) for e in aborted] == [
        (TOP, 0x1_0000_0000, 777),
        (OTHER, None, None),
    ]
    assert aborted[0]["spooled_bytes"] > 100
    # A commit of an aborted transaction's xid replays nothing between Begin and Commit.
    assert [type(m) for m, _ in streams.replay(_commit(TOP))] == [pg.Begin, pg.Commit]


def test_messages_outside_stream_blocks_are_left_to_the_caller() -> None:
    streams = StreamedTransactions(structlog.get_logger())
    begin = pg.Begin(1, 2, 3)
    assert not streams.accept(begin, 1, memoryview(b"B"))
