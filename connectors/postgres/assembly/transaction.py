"""The transaction being assembled: who and when, its next sequence, its row writers.

Positions: an event's ``source.position`` is its transaction's commit LSN (``Begin.final_lsn``,
the start of the commit record), known from the transaction's first message, so the events of
a large transaction delivered in several batches all carry it. The offsets stored at commit are
the commit record's *end* LSN (:attr:`Transaction.commit_lsn`).

``source.sequence`` is Debezium's ``["<last commit lsn>","<lsn>"]``: the end of the latest
commit this run has seen (null until the first, or the stored position on a restart) and the
change's own LSN.
"""

from __future__ import annotations

from typing import NamedTuple

from cdc.contracts.events import Op, SourceInfo
from cdc.envelope.connect_schema import TableSchemas
from cdc.envelope.encode import RecordTemplate
from connectors.postgres.assembly.relation_state import CONNECTOR, RelationState
from connectors.postgres.assembly.source_fields import PG_TAIL
from connectors.postgres.lsn import Lsn
from connectors.postgres.replication.protocol import pg_time_to_unix_ms

#: Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
_PG_EPOCH_US = 946_684_800_000_000


class RowWriter(NamedTuple):
    """A :class:`~cdc.envelope.encode.RecordTemplate` of one transaction, table and operation, cut
    where a streamed change's own parts go, so that a row costs one bytes format for its value
    and one for its position, and no call.

    The value up to its ``ts_ms`` number (:data:`cdc.contracts.events.PreEncoded`) is
    ``prefix + <row JSON> + head + <lsn> + mid + <lsn> + tail``: the change's LSN is written
    twice, in ``source.sequence`` (``["<last commit>","<lsn>"]``, a JSON string) and as
    ``source.lsn``. Its position beside the value is ``[<position>,<sequence>]``.
    """

    prefix: bytes
    #: The template's ``source`` head and ``source.sequence`` up to the change's LSN.
    head: bytes
    #: The end of ``source.sequence``, the template's middle and ``,"lsn":``.
    mid: bytes
    #: The ``source`` fields after ``lsn`` and the template's tail, up to ``ts_ms``.
    tail: bytes
    close: bytes
    #: The JSON of the changes' source position.
    position: bytes


class Transaction:
    """Begin to commit of one transaction, and the commit the current batch ends on.

    Args:
        pipeline: pipeline name (the ``source`` block's ``name``).
        db: database name (``source.db``).
    """

    __slots__ = (
        "_db",
        "_order_head",
        "_order_json",
        "_pipeline",
        "commit_lsn",
        "final_lsn",
        "in_tx",
        "last_commit",
        "seq",
        "ts_ms",
        "ts_us",
        "writers",
        "xid",
    )

    def __init__(self, pipeline: str, db: str) -> None:
        self._pipeline, self._db = pipeline, db
        self.in_tx = False
        self.xid = self.final_lsn = self.ts_ms = self.ts_us = self.seq = 0
        #: The end of the latest commit seen (``source.sequence``'s first LSN).
        self.last_commit: Lsn | None = None
        self._order_head = "[null,"
        self._order_json = b'"[null,\\"'
        #: The end of the latest commit not yet handed out with a batch.
        self.commit_lsn: Lsn | None = None
        #: The row writer per topic and message tag (see :meth:`writer`).
        self.writers: dict[tuple[str, int], RowWriter] = {}

    def begin(self, xid: int, final_lsn: int, commit_ts_us: int) -> None:
        """Start a transaction that commits at ``final_lsn``."""
        self.in_tx = True
        self.xid, self.final_lsn = xid, final_lsn
        self.ts_ms = pg_time_to_unix_ms(commit_ts_us)
        self.ts_us = commit_ts_us + _PG_EPOCH_US
        self.seq = 0
        last = self.last_commit
        self._order_head = "[null," if last is None else f'["{int(last)}",'
        self._order_json = b'"[null,\\"' if last is None else b'"[\\"%d\\",\\"' % last
        self.writers.clear()

    def commit(self, end_lsn: int) -> None:
        """End the transaction at ``end_lsn``, its commit record's end (from the message:
        typed here, once a transaction)."""
        self.in_tx = False
        self.commit_lsn = self.last_commit = Lsn(end_lsn)

    def take_commit(self) -> Lsn | None:
        """The commit a batch taken now ends on (only at a transaction boundary), once."""
        committed = None if self.in_tx else self.commit_lsn
        if committed is not None:
            self.commit_lsn = None
        return committed

    def next_source(self, rel: RelationState, lsn: int) -> SourceInfo:
        """The ``source`` of the transaction's next change (it takes the next sequence)."""
        seq = self.seq
        self.seq = seq + 1
        lsn = lsn or self.final_lsn
        return SourceInfo(
            CONNECTOR,
            self._db,
            rel.info.schema,
            rel.info.table,
            self.ts_ms,
            self.final_lsn,
            seq,
            "false",
            self.xid,
            {"lsn": lsn, "xmin": None, "origin": None, "origin_lsn": None},
            self.ts_us,
            f'{self._order_head}"{int(lsn)}"]',  # order_json's text
        )

    def writer(
        self,
        topic: str,
        tag: int,
        op: Op,
        source: SourceInfo,
        schemas: TableSchemas | None = None,
    ) -> RowWriter:
        """The row writer of the transaction's ``op`` changes of ``topic`` (``tag`` is the
        message tag of ``op``), its ``source`` parts encoded once per transaction and table."""
        writer = self.writers.get((topic, tag))
        if writer is None:
            t = RecordTemplate.of(op, source, self._pipeline, schemas=schemas)
            head = t.head + self._order_json
            mid = b'\\"]"%b,"lsn":' % t.mid
            writer = RowWriter(t.prefix, head, mid, PG_TAIL + t.tail, t.close, t.position)
            self.writers[(topic, tag)] = writer
        return writer

    def where(self, lsn: int) -> str:
        """A change's LSN as text, for messages (the transaction's, when not known)."""
        return str(Lsn(lsn or self.final_lsn))
