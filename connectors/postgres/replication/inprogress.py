"""Transactions the server streams before they commit (protocol 2+, ``streaming`` on/parallel).

Their changes arrive in blocks (``StreamStart`` ... ``StreamStop``) interleaved with other
transactions, and may still abort. Nothing may reach the log before the commit (records and the
commit position are appended atomically, in commit order), so each transaction's raw messages
are spooled to a temporary file, in constant memory, and replayed as one ordinary transaction
when ``StreamCommit`` arrives. An aborted one is dropped and logged, with the abort's LSN and
time where the server sends them (protocol 4, ``streaming = parallel``).
"""

from __future__ import annotations

import struct
import tempfile
from collections.abc import Iterator
from typing import IO

from cdc.support.logging import Logger
from connectors.postgres import pgoutput as pg

_HEAD = struct.Struct("!QI")


class _Spool:
    __slots__ = ("aborted", "file")

    def __init__(self) -> None:
        # Closed explicitly on commit, abort or close: the spool outlives any one block.
        self.file: IO[bytes] = tempfile.TemporaryFile(prefix="cdc-pg-stream-")  # noqa: SIM115
        self.aborted: set[int] = set()

    def close(self) -> None:
        self.file.close()


class StreamedTransactions:
    """Spools of the transactions streamed so far, by top-level xid.

    Args:
        logger: the source's logger (an abort of a whole streamed transaction is logged).
    """

    def __init__(self, logger: Logger) -> None:
        self._logger = logger
        self._spools: dict[int, _Spool] = {}
        self._current: int | None = None
        #: Bytes of the replayed messages so far: the source adds them to its batch's size.
        self.replayed_bytes = 0

    @property
    def open(self) -> bool:
        """Some streamed transaction has neither committed nor aborted yet."""
        return bool(self._spools)

    def accept(self, message: pg.PgOutputMessage, lsn: int, payload: memoryview) -> bool:
        """Take the message if it belongs to streaming; ``False`` leaves it to the caller."""
        kind = type(message)
        if kind is pg.StreamStart:
            assert isinstance(message, pg.StreamStart)
            self._current = message.xid
            self._spools.setdefault(message.xid, _Spool())
        elif kind is pg.StreamStop:
            self._current = None
        elif kind is pg.StreamAbort:
            assert isinstance(message, pg.StreamAbort)
            self._abort(message)
        elif self._current is not None:
            file = self._spools[self._current].file
            file.write(_HEAD.pack(lsn, len(payload)))
            file.write(payload)
        else:
            return False
        return True

    def _abort(self, message: pg.StreamAbort) -> None:
        if message.subxid == message.xid:
            spool = self._spools.pop(message.xid, None)
            if spool is not None:
                self._logger.info(
                    "stream.aborted",
                    xid=message.xid,
                    spooled_bytes=spool.file.tell(),
                    abort_lsn=message.abort_lsn,
                    abort_ts_us=message.abort_ts_us,
                )
                spool.close()
        elif message.xid in self._spools:
            self._spools[message.xid].aborted.add(message.subxid)
            # Debug only: every rolled-back exception block of a large PL/pgSQL run is one.
            self._logger.debug(
                "stream.subtransaction_aborted", xid=message.xid, subxid=message.subxid
            )

    def replay(self, commit: pg.StreamCommit) -> Iterator[tuple[pg.PgOutputMessage, int]]:
        """The committed transaction as ``Begin``, its surviving messages, ``Commit``."""
        spool = self._spools.pop(commit.xid, None)
        yield pg.Begin(commit.commit_lsn, commit.commit_ts_us, commit.xid), commit.commit_lsn
        if spool is not None:
            try:
                yield from self._read(spool)
            finally:
                spool.close()
        end = pg.Commit(commit.flags, commit.commit_lsn, commit.end_lsn, commit.commit_ts_us)
        yield end, commit.commit_lsn

    def _read(self, spool: _Spool) -> Iterator[tuple[pg.PgOutputMessage, int]]:
        file = spool.file
        file.flush()
        file.seek(0)
        while head := file.read(_HEAD.size):
            lsn, size = _HEAD.unpack(head)
            message = pg.decode(file.read(size), streaming=True)
            if getattr(message, "xid", None) in spool.aborted:
                continue  # a subtransaction that rolled back
            self.replayed_bytes += size
            yield message, lsn

    def close(self) -> None:
        """Discard every spool (a reconnect streams those transactions again)."""
        for spool in self._spools.values():
            spool.close()
        self._spools.clear()
