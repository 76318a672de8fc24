"""The pgoutput parser: one message's bytes to its :mod:`.messages` dataclass.

This module is on the hot path (one call per row change), hence precompiled structs, one pass
over the bytes and no per-column objects beyond the values themselves.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, TypeAlias

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
    Update,
)

__all__ = ["Decoder", "decode", "tuple_at"]

_U16 = struct.Struct("!H").unpack_from
_U32 = struct.Struct("!I").unpack_from
_U32_PAIR = struct.Struct("!II").unpack_from
_U64 = struct.Struct("!Q").unpack_from
_KIND_LENGTH = struct.Struct("!BI").unpack_from
_BEGIN = struct.Struct("!QqI").unpack_from
_COMMIT = struct.Struct("!BQQq").unpack_from
_STREAM_COMMIT = struct.Struct("!IBQQq").unpack_from
_STREAM_START = struct.Struct("!IB").unpack_from
_STREAM_ABORT_PARALLEL = struct.Struct("!IIQq")
_MESSAGE_HEAD = struct.Struct("!BQ").unpack_from
_TRUNCATE_HEAD = struct.Struct("!IB").unpack_from
_COLUMN = struct.Struct("!Ii").unpack_from

# Tuple-kind bytes as ints, because indexing bytes yields ints.
_TEXT, _NULL, _UNCH, _BIN = ord("t"), ord("n"), ord("u"), ord("b")
_NEW, _KEY, _OLD = ord("N"), ord("K"), ord("O")

_TRUNCATE_CASCADE = 1
_TRUNCATE_RESTART_IDENTITY = 2


def _cstring(data: bytes, pos: int) -> tuple[str, int]:
    """A NUL-terminated UTF-8 string at ``pos``, and the position after its NUL."""
    end = data.index(0, pos)
    return data[pos:end].decode(), end + 1


def _tuple(data: bytes, pos: int) -> tuple[TupleData, int]:
    """TupleData at ``pos``: Int16 column count, then one (kind, [Int32 length, bytes]) each."""
    (count,) = _U16(data, pos)
    pos += 2
    values: list[TupleValue] = []
    append = values.append
    for _ in range(count):
        try:
            # Kind and length in one unpack; 'n' and 'u' have no length, so near the end of
            # the message the five bytes may not all be there.
            kind, length = _KIND_LENGTH(data, pos)
        except struct.error:
            kind, length = data[pos], 0
        if kind == _TEXT:
            pos += 5
            append(data[pos : pos + length].decode())
            pos += length
        elif kind == _NULL:
            append(None)
            pos += 1
        elif kind == _UNCH:
            append(UNCHANGED)
            pos += 1
        elif kind == _BIN:
            pos += 5
            append(data[pos : pos + length])
            pos += length
        else:
            raise ProtocolError(f"unknown tuple value kind {kind:#04x} at offset {pos}")
    if pos > len(data):
        raise ProtocolError("tuple data runs past the end of the message")
    return tuple(values), pos


def tuple_at(data: bytes, pos: int) -> TupleData:
    """The TupleData at ``data[pos:]`` (see :func:`decode` for the errors)."""
    try:
        return _tuple(data, pos)[0]
    except (struct.error, IndexError, ValueError) as exc:
        raise ProtocolError(f"malformed tuple data: {exc}") from exc


def _xid(data: bytes, streaming: bool) -> tuple[int | None, int]:
    """The streamed xid after the tag (protocol 2), and the position of the next field."""
    if streaming:
        return _U32(data, 1)[0], 5
    return None, 1


def _begin(data: bytes, streaming: bool) -> Begin:
    final_lsn, ts, xid = _BEGIN(data, 1)
    return Begin(final_lsn, ts, xid)


def _commit(data: bytes, streaming: bool) -> Commit:
    flags, commit_lsn, end_lsn, ts = _COMMIT(data, 1)
    return Commit(flags, commit_lsn, end_lsn, ts)


def _origin(data: bytes, streaming: bool) -> Origin:
    (lsn,) = _U64(data, 1)
    name, _ = _cstring(data, 9)
    return Origin(lsn, name)


def _relation(data: bytes, streaming: bool) -> Relation:
    xid, pos = _xid(data, streaming)
    (oid,) = _U32(data, pos)
    namespace, pos = _cstring(data, pos + 4)
    name, pos = _cstring(data, pos)
    identity = chr(data[pos])
    (count,) = _U16(data, pos + 1)
    pos += 3
    columns = []
    for _ in range(count):
        flags = data[pos]
        col_name, pos = _cstring(data, pos + 1)
        type_oid, modifier = _COLUMN(data, pos)
        pos += 8
        columns.append(RelationColumn(bool(flags & 1), col_name, type_oid, modifier))
    return Relation(oid, namespace, name, identity, tuple(columns), xid)


def _type(data: bytes, streaming: bool) -> TypeInfo:
    xid, pos = _xid(data, streaming)
    (oid,) = _U32(data, pos)
    namespace, pos = _cstring(data, pos + 4)
    name, _ = _cstring(data, pos)
    return TypeInfo(oid, namespace, name, xid)


def _insert(data: bytes, streaming: bool) -> Insert:
    if streaming:
        xid, oid = _U32_PAIR(data, 1)
        pos = 9
    else:
        xid = None
        (oid,) = _U32(data, 1)
        pos = 5
    if data[pos] != _NEW:
        raise ProtocolError(f"insert: expected 'N' at offset {pos}, got {data[pos]:#04x}")
    new, _ = _tuple(data, pos + 1)
    return _new_insert(oid, new, xid)


def _new_insert(relation_oid: int, new: TupleData, xid: int | None) -> Insert:
    """``Insert(relation_oid, new, xid)`` at half the cost, for the hottest message.

    A frozen dataclass's ``__init__`` goes through ``object.__setattr__`` per field; the slot
    descriptors set the same fields directly.
    """
    message = _object_new(Insert)
    _set_insert_oid(message, relation_oid)
    _set_insert_new(message, new)
    _set_insert_xid(message, xid)
    return message


_object_new = object.__new__
_set_insert_oid = vars(Insert)["relation_oid"].__set__
_set_insert_new = vars(Insert)["new"].__set__
_set_insert_xid = vars(Insert)["xid"].__set__


def _update(data: bytes, streaming: bool) -> Update:
    xid, pos = _xid(data, streaming)
    (oid,) = _U32(data, pos)
    pos += 4
    kind = data[pos]
    old: TupleData | None = None
    old_kind: str | None = None
    if kind in (_KEY, _OLD):
        old_kind = chr(kind)
        old, pos = _tuple(data, pos + 1)
        kind = data[pos]
    if kind != _NEW:
        raise ProtocolError(f"update: expected 'N' at offset {pos}, got {kind:#04x}")
    new, _ = _tuple(data, pos + 1)
    return Update(oid, old, old_kind, new, xid)


def _delete(data: bytes, streaming: bool) -> Delete:
    xid, pos = _xid(data, streaming)
    (oid,) = _U32(data, pos)
    kind = data[pos + 4]
    if kind not in (_KEY, _OLD):
        raise ProtocolError(f"delete: expected 'K' or 'O', got {kind:#04x}")
    old, _ = _tuple(data, pos + 5)
    return Delete(oid, old, chr(kind), xid)


def _truncate(data: bytes, streaming: bool) -> Truncate:
    xid, pos = _xid(data, streaming)
    count, options = _TRUNCATE_HEAD(data, pos)
    oids = struct.unpack_from(f"!{count}I", data, pos + 5)
    return Truncate(
        oids,
        bool(options & _TRUNCATE_CASCADE),
        bool(options & _TRUNCATE_RESTART_IDENTITY),
        xid,
    )


def _message(data: bytes, streaming: bool) -> LogicalMessage:
    # Non-transactional messages are decoded at once, never inside a stream block, so the
    # streaming flag alone says whether the xid is there.
    xid, pos = _xid(data, streaming)
    flags, lsn = _MESSAGE_HEAD(data, pos)
    prefix, pos = _cstring(data, pos + 9)
    (length,) = _U32(data, pos)
    content = data[pos + 4 : pos + 4 + length]
    if len(content) != length:
        raise ProtocolError("message content runs past the end of the message")
    return LogicalMessage(bool(flags & 1), lsn, prefix, content, xid)


def _stream_start(data: bytes, streaming: bool) -> StreamStart:
    xid, first = _STREAM_START(data, 1)
    return StreamStart(xid, first == 1)


def _stream_stop(data: bytes, streaming: bool) -> StreamStop:
    return _STREAM_STOP


def _stream_commit(data: bytes, streaming: bool) -> StreamCommit:
    xid, flags, commit_lsn, end_lsn, ts = _STREAM_COMMIT(data, 1)
    return StreamCommit(xid, flags, commit_lsn, end_lsn, ts)


def _stream_abort(data: bytes, streaming: bool) -> StreamAbort:
    # The message's length alone tells whether protocol 4's abort LSN and time follow: the
    # server appends them only under streaming = parallel.
    if len(data) == _STREAM_ABORT_PARALLEL.size + 1:
        return StreamAbort(*_STREAM_ABORT_PARALLEL.unpack_from(data, 1))
    if len(data) != 9:
        raise ProtocolError(f"stream abort message of {len(data)} bytes (9 or 25 expected)")
    xid, subxid = _U32_PAIR(data, 1)
    return StreamAbort(xid, subxid)


_STREAM_STOP: Final = StreamStop()

_Parser: TypeAlias = Callable[[bytes, bool], PgOutputMessage]

_PARSERS: Final[dict[int, _Parser]] = {
    ord("B"): _begin,
    ord("C"): _commit,
    ord("O"): _origin,
    ord("R"): _relation,
    ord("Y"): _type,
    ord("I"): _insert,
    ord("U"): _update,
    ord("D"): _delete,
    ord("T"): _truncate,
    ord("M"): _message,
    ord("S"): _stream_start,
    ord("E"): _stream_stop,
    ord("c"): _stream_commit,
    ord("A"): _stream_abort,
}

_TWO_PHASE_TAGS: Final = frozenset(b"bPKrp")


def decode(data: bytes | bytearray | memoryview, *, streaming: bool = False) -> PgOutputMessage:
    """Decode one pgoutput message.

    Args:
        data: the message bytes, starting with its tag byte.
        streaming: True between ``StreamStart`` and ``StreamStop`` (protocol 2), where data
            messages carry an xid after the tag.

    Returns:
        The message as a frozen dataclass.

    Raises:
        ProtocolError: unknown tag, truncated or malformed message.
    """
    if type(data) is not bytes:
        # One copy up front: slicing and decoding bytes is faster than a memoryview per value.
        data = bytes(data)
    if not data:
        raise ProtocolError("empty pgoutput message")
    parser = _PARSERS.get(data[0])
    if parser is None:
        raise ProtocolError(_unknown_tag(data[0]))
    try:
        return parser(data, streaming)
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError) as exc:
        # ValueError covers a missing NUL terminator and invalid UTF-8 (UnicodeDecodeError).
        tag = chr(data[0])
        raise ProtocolError(f"malformed pgoutput message {tag!r}: {exc}") from exc


def _unknown_tag(tag: int) -> str:
    if tag in _TWO_PHASE_TAGS:
        return f"two-phase pgoutput message {chr(tag)!r} is not supported (two_phase is off)"
    return f"unknown pgoutput message tag {tag:#04x}"


class Decoder:
    """:func:`decode` that follows ``StreamStart``/``StreamStop`` to know when xids are sent.

    One decoder per replication session: the stream-block state does not survive a reconnect.
    """

    __slots__ = ("streaming",)

    def __init__(self) -> None:
        self.streaming = False

    def __call__(self, data: bytes | bytearray | memoryview) -> PgOutputMessage:
        """Decode one message and update the stream-block state."""
        message = decode(data, streaming=self.streaming)
        if type(message) is StreamStart:
            self.streaming = True
        elif type(message) is StreamStop:
            self.streaming = False
        return message
