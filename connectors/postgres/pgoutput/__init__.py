"""Decode pgoutput logical replication messages, as pure functions over bytes.

The format is PostgreSQL's "Logical Replication Message Formats" (protocol versions 1 and 2).
:func:`decode` turns one message (the payload of an XLogData frame, or one ``data`` value of
``pg_logical_slot_peek_binary_changes``) into a frozen dataclass.

Protocol version 2 streams large in-progress transactions: between ``StreamStart`` and
``StreamStop`` the data messages carry the xid of the (sub)transaction right after their tag.
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
