"""The record template: a record value's bytes with what changes per change left open, and
the ``source`` block it holds (Debezium's ``version`` ... ``ts_ns``, then the connector's
fields), and the record's source position, which travels beside the value
(:attr:`cdc.log.base.Record.pos`: the Kafka header ``cdc.pos``, the embedded log's ``pos``
column), never in it: a Debezium consumer reads Debezium's bytes.

Every record value is written through one :class:`RecordTemplate`:
:func:`cdc.envelope.encode.encode_value`, a source that writes its records itself
(:data:`cdc.contracts.events.PreEncoded`, the PostgreSQL stream) and the snapshot's native encoder,
which is handed the template's pieces. Split from :mod:`cdc.envelope.encode`, which re-exports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import orjson

from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.envelope.connect_schema import TableSchemas
from cdc.envelope.json_rows import json_default, json_of

CONNECTOR_VERSION = "0.1.0"


def write_pos(position: Any, sequence: Any) -> bytes:
    """A record's source position, ``[position, sequence]`` as JSON: what
    :attr:`cdc.log.base.Record.pos` holds.

    It orders the changes of one key totally, so a sink can skip any record whose position is
    not newer than what it holds. :meth:`RecordTemplate.pos` writes the same.
    """
    if sequence.__class__ is int:
        return b"[%b,%d]" % (json_of(position), sequence)
    return orjson.dumps([position, sequence], default=json_default)


class RecordTemplate(NamedTuple):
    """A record value with what changes from change to change left open.

    The value is ``prefix + after + head + order + mid + extra + tail + stamp(now) +
    close``: ``order`` is the JSON of ``source.sequence`` (Debezium's, per change), ``extra``
    the connector's fields after ``txId`` (``,"lsn":...``, per change, :func:`extra_json`).
    The record's position beside it is :meth:`pos` of the change's sequence. One is built per
    transaction (or snapshot chunk), table and operation, never per row.

    Attributes:
        prefix: ``[{"schema":<S>,"payload":]{"before":<JSON>,"after":``.
        head: ``,"source":{"version":...,"db":...,"sequence":``.
        mid: ``,"ts_us":...,"ts_ns":...,"schema":...,"table":...,"txId":...``.
        position: the JSON of the changes' source position (:meth:`pos`).
        tail: ``},"transaction":null,"op":"<op>","ts_ms":``.
        close: ``}``, or ``}}`` inside the schema wrapper.
    """

    prefix: bytes
    head: bytes
    mid: bytes
    position: bytes
    tail: bytes
    close: bytes

    @classmethod
    def of(
        cls,
        op: Op,
        src: SourceInfo,
        pipeline: str,
        before: bytes = b"null",
        schemas: TableSchemas | None = None,
    ) -> RecordTemplate:
        """The template of ``op`` changes with ``src``'s transaction-wide fields, ``before``
        (JSON) as their old image, and ``schemas`` (``schemas.enable``) or none."""
        head, mid = source_parts(src, pipeline)
        prefix = b'{"before":%b,"after":' % before
        close = b"}"
        if schemas is not None:
            prefix, close = schemas.value_prefix + prefix, b"}}"
        return cls(prefix, head, mid, json_of(src.position), _OP_PARTS[op], close)

    def value(self, after: bytes, order: bytes, extra: bytes, now_ms: int) -> bytes:
        """The whole record value."""
        return b"%b%b%b%b%b%b%b%b%b" % (
            self.prefix,
            after,
            self.head,
            order,
            self.mid,
            extra,
            self.tail,
            stamp(now_ms),
            self.close,
        )

    def value_at(self, after: bytes, order: bytes, extra: bytes) -> bytes:
        """The value up to its ``ts_ms`` number (:data:`PreEncoded`); :func:`finish` completes
        it with :attr:`close`."""
        return b"%b%b%b%b%b%b%b" % (
            self.prefix,
            after,
            self.head,
            order,
            self.mid,
            extra,
            self.tail,
        )

    def pos(self, sequence: int) -> bytes:
        """The position of the change at ``sequence`` (:func:`write_pos`)."""
        return b"[%b,%d]" % (self.position, sequence)

    def pieces(self, order: bytes, extra: bytes, now_ms: int) -> tuple[bytes, bytes, bytes]:
        """``(prefix, middle, tail)`` with ``prefix + after + middle + tail`` the value, for
        rows sharing ``order`` and ``extra`` (a snapshot chunk's): for an encoder that writes a
        batch of rows at once (the native snapshot one)."""
        middle = b"%b%b%b%b" % (self.head, order, self.mid, extra)
        return self.prefix, middle, b"%b%b%b" % (self.tail, stamp(now_ms), self.close)

    def marked(self, value: bytes, other: RecordTemplate) -> bytes:
        """``value``, written through this template, with ``other``'s ``source`` head (the same
        but for ``source.snapshot``): the first and last rows of a snapshot."""
        at = value.rfind(self.head)
        return value[:at] + other.head + value[at + len(self.head) :]


def stamp(now_ms: int) -> bytes:
    """The envelope's ``ts_ms`` number and its ``ts_us``/``ts_ns`` (wall clock, from ms)."""
    return b'%d,"ts_us":%d,"ts_ns":%d' % (now_ms, now_ms * 1000, now_ms * 1_000_000)


def extra_json(extra: Mapping[str, Any]) -> bytes:
    """The ``source`` fields after ``txId`` as they follow it: ``,"lsn":...`` (or nothing)."""
    if not extra:
        return b""
    return b"," + orjson.dumps(extra, default=json_default)[1:-1]


def order_json(order: str | None) -> bytes:
    """``source.sequence`` as JSON (a string holding JSON, or null)."""
    return b"null" if order is None else orjson.dumps(order)


def finish(value_head: bytes, now_ms: int, close: bytes = b"}") -> bytes:
    """A :data:`PreEncoded` value finished with its timestamps."""
    return b"%b%b%b" % (value_head, stamp(now_ms), close)


def source_block(event: ChangeEvent, pipeline: str) -> dict[str, Any]:
    """The envelope's ``source`` block (the dict form; :func:`source_parts` is the bytes)."""
    src = event.source
    block = _source_common(src, pipeline)
    block.update(_source_table(src))
    if src.extra:
        block.update(src.extra)
    return block


def _source_common(src: SourceInfo, pipeline: str) -> dict[str, Any]:
    """The fields every Debezium ``source`` block starts with, in its order."""
    ts_us = src.ts_us if src.ts_us is not None else src.ts_ms * 1000
    return {
        "version": CONNECTOR_VERSION,
        "connector": src.connector,
        "name": pipeline,
        "ts_ms": src.ts_ms,
        "snapshot": src.snapshot,
        "db": src.db,
        "sequence": src.order,
        "ts_us": ts_us,
        "ts_ns": ts_us * 1000,
    }


def _source_table(src: SourceInfo) -> dict[str, Any]:
    if not src.table_fields:
        return {}
    return {"schema": src.schema, "table": src.table, "txId": src.tx_id}


def source_parts(src: SourceInfo, pipeline: str) -> tuple[bytes, bytes]:
    """The ``source`` block's bytes around its ``sequence``: ``(head, mid)``
    (:class:`RecordTemplate`), the same for every change of one transaction and table."""
    common = orjson.dumps(_source_common(src, pipeline), default=json_default)
    at = common.index(b',"sequence":')
    head = b',"source":' + common[:at] + b',"sequence":'
    rest = common[common.index(b',"ts_us":') : -1]
    table = _source_table(src)
    if table:
        rest += b"," + orjson.dumps(table, default=json_default)[1:-1]
    return head, rest


_OP_PARTS: Final = {
    op: b'},"transaction":null,"op":"' + op.value.encode() + b'","ts_ms":' for op in Op
}
