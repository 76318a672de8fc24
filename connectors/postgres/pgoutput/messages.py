"""The pgoutput messages, as frozen dataclasses; :mod:`.parser` builds them from bytes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal, TypeAlias

from cdc.contracts.errors import SourceFatal

__all__ = [
    "UNCHANGED",
    "Begin",
    "Commit",
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
]


class ProtocolError(SourceFatal):
    """A message does not follow the pgoutput format (unknown tag, truncated, bad encoding)."""


class Unchanged(Enum):
    """Type of :data:`UNCHANGED`; an enum so the sentinel survives pickling and narrows in mypy."""

    UNCHANGED = "u"

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = Unchanged.UNCHANGED
"""An unchanged TOASTed value ('u'): the server did not resend it; the previous image has it."""

TupleValue: TypeAlias = str | bytes | Literal[Unchanged.UNCHANGED] | None
TupleData: TypeAlias = tuple[TupleValue, ...]


@dataclass(frozen=True, slots=True)
class Begin:
    """Start of a transaction ('B').

    Attributes:
        final_lsn: LSN of the transaction's commit record.
        commit_ts_us: commit time, microseconds since 2000-01-01 UTC.
        xid: the transaction id.
    """

    final_lsn: int
    commit_ts_us: int
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    """End of a transaction ('C')."""

    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True, slots=True)
class Origin:
    """Replication origin of the transaction ('O'), sent after ``Begin`` when it has one."""

    commit_lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class RelationColumn:
    """One column of a :class:`Relation`; ``is_key`` marks replica identity columns."""

    is_key: bool
    name: str
    type_oid: int
    type_modifier: int


@dataclass(frozen=True, slots=True)
class Relation:
    """Table description ('R'), sent before the first change of a table in a session.

    Attributes:
        replica_identity: ``'d'`` default (primary key), ``'n'`` nothing, ``'f'`` full,
            ``'i'`` index.
        namespace: the schema; the server sends ``''`` for ``pg_catalog``.
    """

    oid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """Name of a non-built-in column type ('Y'), sent before the :class:`Relation` using it."""

    oid: int
    namespace: str
    name: str
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Insert:
    """A new row ('I')."""

    relation_oid: int
    new: TupleData
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Update:
    """A changed row ('U').

    ``old`` is present only when the replica identity changed (``old_kind='K'``, key columns
    only, others ``None``) or the table has ``REPLICA IDENTITY FULL`` (``old_kind='O'``).
    """

    relation_oid: int
    old: TupleData | None
    old_kind: str | None
    new: TupleData
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    """A deleted row ('D'): key columns (``old_kind='K'``) or the whole row (``'O'``)."""

    relation_oid: int
    old: TupleData
    old_kind: str
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Truncate:
    """``TRUNCATE`` of one or more tables ('T')."""

    relation_oids: tuple[int, ...]
    cascade: bool
    restart_identity: bool
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    """A ``pg_logical_emit_message`` payload ('M')."""

    transactional: bool
    lsn: int
    prefix: str
    content: bytes
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class StreamStart:
    """Start of a block of an in-progress transaction ('S', protocol 2)."""

    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    """End of a block of an in-progress transaction ('E', protocol 2)."""


@dataclass(frozen=True, slots=True)
class StreamCommit:
    """Commit of a streamed transaction ('c', protocol 2)."""

    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True, slots=True)
class StreamAbort:
    """Abort of a streamed transaction or subtransaction ('A', protocol 2).

    ``subxid == xid`` when the whole transaction aborted; otherwise only the changes the
    subtransaction ``subxid`` streamed are void. ``abort_lsn`` and ``abort_ts_us`` (the abort
    record's LSN and time, microseconds since 2000-01-01 UTC) come with protocol 4's
    ``streaming = parallel`` only, ``None`` otherwise.
    """

    xid: int
    subxid: int
    abort_lsn: int | None = None
    abort_ts_us: int | None = None


PgOutputMessage: TypeAlias = (
    Begin
    | Commit
    | Origin
    | Relation
    | TypeInfo
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
)
