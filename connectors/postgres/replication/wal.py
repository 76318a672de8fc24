"""The replication stream's messages, applied to the assembler: the source's hot loop.

One drain loop for both protocols: with ``streaming=on`` (protocol 2) a large transaction
arrives in streamed pieces, which :class:`StreamedTransactions` spools until its commit and then
replays here; without it each change goes to the native encoder first, and to the decoder when
the encoder declines.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from cdc.config.batch_bytes import BATCH_BYTES
from connectors.postgres import pgoutput as pg
from connectors.postgres.assembly.assembler import Assembler
from connectors.postgres.replication.connection import ReplicationConnection
from connectors.postgres.replication.flush import Flush
from connectors.postgres.replication.inprogress import StreamedTransactions
from connectors.postgres.replication.protocol import XLOG_HEADER_SIZE, xlog_wal_start

_XLOG_TAG = ord("w")


class WalReader:
    """Reads one streaming session's messages into an assembler.

    Args:
        repl: the streaming connection.
        flush: the session's positions (keepalives and received WAL go there).
        streams: the spool of streamed transactions, when protocol 2 streaming is on.
    """

    def __init__(
        self,
        repl: ReplicationConnection,
        flush: Flush,
        streams: StreamedTransactions | None,
        max_bytes: int = BATCH_BYTES,
    ) -> None:
        self._repl, self._flush, self.streams = repl, flush, streams
        self.max_bytes = max_bytes
        # Nothing of an earlier session carries over: the server resends from the start.
        self._decoder = pg.Decoder()
        self._replay: Iterator[tuple[pg.PgOutputMessage, int]] | None = None

    @property
    def replaying(self) -> bool:
        """A streamed transaction is being replayed, or one is still open on the server."""
        return self._replay is not None or (self.streams is not None and self.streams.open)

    def drain(self, asm: Assembler, limit: int, wait_s: float = 0.0) -> int:
        """Apply messages until the batch is full or none is waiting; returns how many.

        The first message may be waited for up to ``wait_s`` (keepalives keep waiting). The
        hot loop: one iteration per change, so it keeps to locals and skips the clocks. Bounded
        by messages too: a long run that makes no event (keepalives, other tables' changes)
        must still return to ``poll``'s housekeeping (status updates, heartbeats). Bounded by
        bytes: each change's message adds its size to the batch's (``nbytes``, an attribute,
        not a call), and the batch is full at ``max_bytes`` as it is at ``limit`` events.
        """
        read, decode, handle, from_bytes = (
            self._repl.read,
            self._decoder,
            asm.handle,
            asm.change_from_bytes,
        )
        flush, streams, changes, wal_start = self._flush, self.streams, asm.changes, xlog_wal_start
        batch, max_bytes = asm.batch, self.max_bytes
        deadline = time.monotonic() + wait_s if wait_s else 0.0
        handled = 0
        while not asm.cut and len(changes) < limit and handled < limit and batch.size < max_bytes:
            if self._replay is not None and self._replayed(asm):
                handled += 1
                continue
            data = read(wait_s)
            if data is None:
                break
            if data[0] != _XLOG_TAG:
                seen = flush.wal_end
                flush.keepalive(data)
                if flush.wal_end > seen and not asm.in_tx:
                    break  # WAL passed between transactions: the poll may offer it (IdleOffers)
                if wait_s:
                    wait_s = max(0.0, deadline - time.monotonic())
                continue
            wait_s = 0.0
            lsn = wal_start(data)[0]
            if lsn > flush.received:
                flush.received = lsn
            payload = bytes(data[XLOG_HEADER_SIZE:])
            if streams is None:
                batch.size += data.nbytes
                if not from_bytes(payload, lsn):
                    handle(decode(payload), lsn)
            elif not self._streamed(asm, decode(payload), lsn, payload):
                continue
            handled += 1
        return handled

    def _replayed(self, asm: Assembler) -> bool:
        """Apply the next message of the streamed transaction being replayed, if any is left."""
        assert self._replay is not None
        item = next(self._replay, None)
        if item is None:
            self._replay = None
            return False
        asm.handle(*item)
        assert self.streams is not None
        asm.batch.size += self.streams.replayed_bytes
        self.streams.replayed_bytes = 0
        return True

    def _streamed(self, asm: Assembler, message: pg.PgOutputMessage, lsn: int, raw: bytes) -> bool:
        """Apply a message of the protocol 2 stream; ``False`` when it was spooled instead."""
        assert self.streams is not None
        if self.streams.accept(message, lsn, memoryview(raw)):
            return False
        if type(message) is pg.StreamCommit:
            self._replay = self.streams.replay(message)
            return False
        asm.batch.size += len(raw)  # applied now, not spooled: it counts towards the batch
        asm.handle(message, lsn)
        return True

    def close(self) -> None:
        """Drop the spool of streamed transactions."""
        if self.streams is not None:
            self.streams.close()
            self.streams = None
