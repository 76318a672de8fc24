"""What the PostgreSQL source tells the server: the flush position, and heartbeats.

The flush LSN is what lets the server recycle WAL, so it advances only in :meth:`Flush.ack`,
once the log holds everything before it; it never goes below the position streaming started
from (PostgreSQL 15 would move the slot back). Status updates go out every status interval,
and at once when the server asks for a reply (a shutdown waits until we confirm all it sent).
"""

from __future__ import annotations

import time

import psycopg

from cdc.contracts.positions import Offsets, position_in, require_forward
from cdc.support.logging import Logger
from connectors.postgres.catalog import Catalog
from connectors.postgres.lsn import Lsn
from connectors.postgres.replication.connection import ReplicationConnection
from connectors.postgres.replication.protocol import parse_keepalive, standby_status_update

#: How long a session waits before its first idle offer (see :meth:`IdleOffers.restart`).
FIRST_IDLE_OFFER_S = 1.0
#: The least time between two idle offers after a session's first (``idle_commit_interval_s``).
IDLE_OFFER_S = 0.2
#: How often an idle session asks the server how far its decoding went (:meth:`Flush.ping`).
IDLE_PING_S = 0.1


class Flush:
    """The positions of one streaming session: received, acknowledged, the server's WAL end.

    Args:
        repl: the streaming connection.
        start: where streaming started (the slot's position or later).
        interval_s: the status interval.
        logger: the source's logger.
    """

    def __init__(
        self, repl: ReplicationConnection, start: Lsn, interval_s: float, logger: Logger
    ) -> None:
        self._repl, self._interval_s, self._logger = repl, interval_s, logger
        # Never report a flush position below the slot's: PostgreSQL 15 would move it back.
        self.acked: Lsn = start
        # The WAL received and the server's WAL end: the per-message loop stores the socket's
        # plain ints here (an Lsn is made only where one leaves: send, IdleOffers.offer).
        self.received: int = start
        self.wal_end = 0
        self.reply_wanted = False
        self._last_ack: Lsn | None = None  # what the runtime acked last, for the backwards check
        self._last_status = time.monotonic()
        self._last_ping = 0.0

    def ack(self, offsets: Offsets) -> None:
        """The offsets are durable in the log: the flush LSN may advance to them.

        Raises:
            PositionMovedBackwards: they are before the previous ``ack`` of this session.
        """
        lsn = position_in(offsets, Lsn)
        if lsn is None:
            return
        require_forward(self._last_ack, lsn, "acknowledged")
        self._last_ack = lsn
        if lsn > self.acked:
            self.acked = lsn
            if self.reply_wanted:
                self.reply_wanted = False
                self.send()

    def keepalive(self, data: memoryview) -> None:
        """Take a primary keepalive: its WAL end, and answer at once when asked to."""
        keepalive = parse_keepalive(data)
        if keepalive.wal_end > self.wal_end:
            self.wal_end = keepalive.wal_end
        if keepalive.reply_requested:
            # The server waits on us: offer the position at once, report it once acked.
            self.reply_wanted = True
            self.send()

    def ping(self, now: float) -> None:
        """While idle, ask the server where its decoding stands, every :data:`IDLE_PING_S`.

        A walsender that has decoded everything written sleeps without saying how far that is
        (its keepalive comes only when it waits inside a record, or after half of
        ``wal_sender_timeout``), so WAL that held no captured change would not move the stored
        position until more WAL comes: a read-your-writes fence on an idle database (``cdc
        wait --now``) would wait that long. Its answer is a keepalive (:meth:`keepalive`).
        """
        if now - self._last_ping >= IDLE_PING_S:
            self._last_ping = now
            self.send(reply_requested=True)

    def ping_in(self, now: float) -> float:
        """Seconds until the next :meth:`ping` is due."""
        return max(0.0, IDLE_PING_S - (now - self._last_ping))

    def due(self, now: float) -> None:
        """Send a status update when the interval has passed."""
        if now - self._last_status >= self._interval_s:
            self.send()

    def send(self, reply_requested: bool = False) -> None:
        """Report the flush position (and at least as much received); ``reply_requested``:
        the server answers with a keepalive holding the WAL it has decoded."""
        flush = self.acked
        received = Lsn(self.received) if self.received > flush else flush
        update = standby_status_update(received, flush, flush, reply_requested=reply_requested)
        self._repl.send(update)
        self._last_status = time.monotonic()
        self._logger.debug("slot.status_sent", flush_lsn=flush)


class IdleOffers:
    """When WAL passed while no captured table changed, the position worth storing.

    Safe because the server sends a transaction only when it decodes its commit: every commit
    not yet received lies beyond the keepalive's position, and the slot's restart point stays
    before any transaction still running.
    """

    def __init__(self, interval_s: float, every_s: float = IDLE_OFFER_S) -> None:
        # A session's first offer: at most a second, so a read-your-writes fence set right
        # after a start (on WAL without a captured change) does not wait the status interval.
        self._interval_s = min(interval_s, FIRST_IDLE_OFFER_S)
        # After the first: read-your-writes fences (cdc wait) wait for the stored position to
        # pass the server's, so an idle offer waits this little; one small log commit each
        # (on Kafka a transaction and a record of the offsets topic: not much less).
        self._every_s = min(every_s, self._interval_s)
        self._offered = 0
        self._last = 0.0
        self._wait_s = self._interval_s

    def restart(self) -> None:
        """A new session: the server resends from its start, so nothing offered carries over.

        The first offer waits a while too (:data:`FIRST_IDLE_OFFER_S`, or the status interval
        when shorter): while a session starts, the server may still be
        decoding a transaction committed just before, and its keepalives then stand inside it.
        Storing such a position is safe, but it would cut a large transaction's batches with a
        commit that carries no events.
        """
        self._offered, self._last, self._wait_s = 0, time.monotonic(), self._interval_s

    def offer(self, flush: Flush) -> Lsn | None:
        """The keepalive's WAL end, when it is new and the interval passed (or a reply is due)."""
        position = flush.wal_end
        if position <= max(flush.acked, self._offered):
            return None
        now = time.monotonic()
        if now - self._last < self._wait_s and not flush.reply_wanted:
            return None
        self._offered, self._last, self._wait_s = position, now, self._every_s
        return Lsn(position)


class Heartbeat:
    """Writes a logical message every interval, so an idle slot still advances (with WAL of
    other databases moving on) and the pipeline's lag shows."""

    def __init__(self, prefix: str, interval_s: float | None, logger: Logger) -> None:
        self.prefix, self.interval_s, self._logger = prefix, interval_s, logger
        self._catalog: Catalog | None = None
        self._last = 0.0

    def start(self, catalog: Catalog) -> None:
        """A new session, on ``catalog``: the first beat is one interval away.

        Off on a standby, which cannot write WAL; the primary's own messages (and its other
        WAL) reach the slot there through replication.
        """
        self._catalog, self._last = catalog, time.monotonic()
        if self.interval_s is not None and catalog.in_recovery():
            self.interval_s = None
            self._logger.warning(
                "heartbeat.disabled",
                reason="source.dsn points at a standby, which cannot write the heartbeat "
                "(pg_logical_emit_message); run it on the primary instead: SELECT "
                f"pg_logical_emit_message(false, '{self.prefix}', '');",
            )

    def due(self, now: float) -> None:
        """Beat when the interval passed; off for good (every later session too) when the role
        may not write messages."""
        if self.interval_s is None or now - self._last < self.interval_s:
            return
        self._last = now
        assert self._catalog is not None
        try:
            self._catalog.emit_message(self.prefix, "")
        except psycopg.errors.InsufficientPrivilege as exc:
            self.interval_s = None
            self._logger.warning("heartbeat.disabled", reason=str(exc))
