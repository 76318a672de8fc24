"""pgoutput, PostgreSQL's logical replication message format, decoded as pure functions over
bytes: the message dataclasses (:mod:`.messages`) and the decoder (:mod:`.parser`).

The format is PostgreSQL's "Logical Replication Message Formats" (protocol versions 1 to 4;
3's two-phase messages are refused, as the source never turns ``two_phase`` on).
:func:`decode` turns one message (the payload of an XLogData frame, or one ``data`` value of
``pg_logical_slot_peek_binary_changes``) into a frozen dataclass.

Protocol version 2 streams large in-progress transactions: between ``StreamStart`` and
``StreamStop`` the data messages carry the xid of the (sub)transaction right after their tag.
Protocol 4 (``streaming = parallel``) adds the abort LSN and time to ``StreamAbort``.
The caller says whether it is inside such a block (``streaming=True``), or uses :class:`Decoder`,
which tracks it.

The package: :mod:`.messages` (the message dataclasses, the ``UNCHANGED`` sentinel and
:class:`ProtocolError`) and :mod:`.parser` (:func:`decode`, :class:`Decoder`, :func:`tuple_at`,
the hot path).
"""

from __future__ import annotations

from connectors.postgres.pgoutput.messages import (
    UNCHANGED,
    Begin,
    Commit,
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
    TupleData,
    TupleValue,
    TypeInfo,
    Unchanged,
    Update,
)
from connectors.postgres.pgoutput.parser import Decoder, decode, tuple_at

__all__ = [
    "UNCHANGED",
    "Begin",
    "Commit",
    "Decoder",
    "Delete",
    "Insert",
    "LogicalMessage",
    "Origin",
    "PgOutputMessage",
    "ProtocolError",
    "Relation",
    "RelationColumn",
    "StreamAbort",
    "StreamCommit",
    "StreamStart",
    "StreamStop",
    "Truncate",
    "TupleData",
    "TupleValue",
    "TypeInfo",
    "Unchanged",
    "Update",
    "decode",
    "tuple_at",
]
