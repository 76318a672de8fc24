"""The transaction being assembled: who and when, its next sequence, its record templates.

Positions: an event's ``source.position`` is its transaction's commit LSN (``Begin.final_lsn``,
the start of the commit record), known from the transaction's first message, so the events of
a large transaction delivered in several batches all carry it. The offsets stored at commit are
the commit record's *end* LSN (:attr:`Transaction.commit_lsn`).
"""

from __future__ import annotations

from cdc.envelope import RecordTemplate, source_head
from cdc.events import Op, SourceInfo
from connectors.postgres.lsn import Lsn
from connectors.postgres.protocol import pg_time_to_unix_ms
from connectors.postgres.relations import CONNECTOR, RelationState


class Transaction:
    """Begin to commit of one transaction, and the commit the current batch ends on.

    Args:
        pipeline: pipeline name (the ``source`` block's ``name``).
        db: database name (``source.db``).
    """

    __slots__ = (
        "_db",
        "_pipeline",
        "commit_lsn",
        "final_lsn",
        "in_tx",
        "seq",
        "templates",
        "ts_ms",
        "xid",
    )

    def __init__(self, pipeline: str, db: str) -> None:
        self._pipeline, self._db = pipeline, db
        self.in_tx = False
        self.xid = self.final_lsn = self.ts_ms = self.seq = 0
        #: The end of the latest commit not yet handed out with a batch.
        self.commit_lsn: int | None = None
        #: The record template per topic and message tag (see :meth:`template`).
        self.templates: dict[tuple[str, int], RecordTemplate] = {}

    def begin(self, xid: int, final_lsn: int, commit_ts_us: int) -> None:
        """Start a transaction that commits at ``final_lsn``."""
        self.in_tx = True
        self.xid, self.final_lsn = xid, final_lsn
        self.ts_ms = pg_time_to_unix_ms(commit_ts_us)
        self.seq = 0
        self.templates.clear()

    def commit(self, end_lsn: int) -> None:
        """End the transaction at ``end_lsn``, its commit record's end."""
        self.in_tx = False
        self.commit_lsn = end_lsn

    def take_commit(self) -> int | None:
        """The commit a batch taken now ends on (only at a transaction boundary), once."""
        committed = None if self.in_tx else self.commit_lsn
        if committed is not None:
            self.commit_lsn = None
        return committed

    def next_source(self, rel: RelationState, lsn: int) -> SourceInfo:
        """The ``source`` of the transaction's next change (it takes the next sequence)."""
        seq = self.seq
        self.seq = seq + 1
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
            {"lsn": lsn or self.final_lsn},
        )

    def template(self, topic: str, tag: int, op: Op, source: SourceInfo) -> RecordTemplate:
        """The record template of the transaction's ``op`` changes of ``topic`` (``tag`` is the
        message tag of ``op``), its ``source`` head encoded once per transaction and table."""
        template = self.templates.get((topic, tag))
        if template is None:
            head = source_head(source, self._pipeline)
            template = self.templates[(topic, tag)] = RecordTemplate.of(op, head, source.position)
        return template

    def where(self, lsn: int) -> str:
        """A change's LSN as text, for messages (the transaction's, when not known)."""
        return str(Lsn(lsn or self.final_lsn))
