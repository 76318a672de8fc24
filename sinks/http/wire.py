"""What goes on the wire: each record's stable id and JSON, and a batch's body and message id.
Pure functions, no I/O.

A record's id is its source position and a digest of its key
(``<topic>:<position>:<sequence>:<key digest>``), the same whichever offset, batch or worker
carries it, so a receiver de-duplicates record by record however the batches were cut before
and after a restart. The position alone does not tell records apart: every row of a MongoDB
snapshot has ``(position, 0)``, and a snapshot's rows of two tables share positions (hence the
topic). A delete's tombstone has the delete's position and key, so its id is the delete's. A
record with no position (one appended before the log kept positions) is
``<topic>/<partition>/<offset>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from cdc.contracts.sink import SinkRecord

#: A record's place in the log: what the sink tells its records apart by while delivering.
Place = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class Entry:
    """One record ready to send: its id, its JSON, the record (for a dead letter) and its
    place in the log."""

    id: str
    json: bytes
    record: SinkRecord
    place: Place


def position_of(record: SinkRecord) -> tuple[Any, Any] | None:
    """The record's ``(position, sequence)``, or ``None`` when it has none."""
    try:
        return record.position
    except (KeyError, TypeError, ValueError):
        return None


#: Bytes of the key digest in an id: 80 bits, so the rows of a snapshot sharing one position
#: (hundreds of millions) practically never share a digest.
DIGEST_BYTES = 10


def key_digest(key: dict[str, Any] | None) -> str:
    """A digest of the record key (its JSON, keys sorted: the same for every copy of it)."""
    data = orjson.dumps(key, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def record_id(record: SinkRecord, position: tuple[Any, Any] | None) -> str:
    if position is None:
        return f"{record.topic}/{record.partition}/{record.offset}"
    return f"{record.topic}:{position[0]}:{position[1]}:{key_digest(record.key)}"


def _plain_pos(record: SinkRecord) -> tuple[str, bytes] | None:
    """The id and the position's JSON of a record whose stored position is two integers
    (``[123,4]``, PostgreSQL's), read from its bytes: parsing them (``record.position``) was
    the sink's largest per-record cost. ``None``: parse it."""
    pos = record.pos
    if pos is None or pos[:1] != b"[" or pos[-1:] != b"]":
        return None
    first, comma, second = pos[1:-1].partition(b",")
    if not (comma and first.isdigit() and second.isdigit()):
        return None
    rid = f"{record.topic}:{first.decode()}:{second.decode()}:{key_digest(record.key)}"
    return rid, pos


def entry(record: SinkRecord, form: str, prefix: str) -> Entry | None:
    """``record`` as it is sent under ``form`` (``debezium`` or ``rows``).

    A tombstone is its delete, under the delete's id (it carries the delete's position):
    compaction may have removed the delete while the sink was behind, and a receiver that got
    the delete de-duplicates the tombstone by id. In ``rows`` it is the delete's very record;
    in ``debezium`` it is ``{topic, key, value: null}``, Debezium's tombstone. ``None`` for a
    tombstone without a position (written before tombstones carried one): its delete told the
    receiver (its offset is committed all the same).

    ``prefix`` is ``"<pipeline>."``, taken off the topic to name the table.
    """
    value = record.value
    if value is None and record.pos is None:
        return None
    plain = _plain_pos(record)
    if plain is None:
        position = position_of(record)
        rid = record_id(record, position)
        pos = b"null" if position is None else orjson.dumps(list(position))
    else:
        rid, pos = plain
    if form == "rows":
        rest = orjson.dumps(rows_body(record, value, prefix))
    else:
        rest = orjson.dumps({"topic": record.topic, "key": record.key, "value": value})
    # {"id":…,"position":…, then the rest's members: the position's bytes as they are stored.
    head = b'{"id":%s,"position":%s,' % (orjson.dumps(rid), pos)
    place = (record.topic, record.partition, record.offset)
    return Entry(rid, head + rest[1:], record, place)


def rows_body(record: SinkRecord, value: dict[str, Any] | None, prefix: str) -> dict[str, Any]:
    """``{op, table, key, row}``: ``row`` the state after the change; a delete's row is its
    key alone, never its ``before`` (under REPLICA IDENTITY DEFAULT Debezium fills the other
    NOT NULL columns with placeholders, ``0`` and ``""``, that the row never held); a
    truncate's key and row are null. A tombstone (``value`` None) is its delete."""
    op = "d" if value is None else value.get("op")
    table = record.topic.removeprefix(prefix)
    if op == "d":
        row = record.key
    elif op == "t" or value is None:
        row = None
    else:
        row = value.get("after")
    return {"op": op, "table": table, "key": record.key, "row": row}


def follows_its_delete(record: SinkRecord, before: SinkRecord | None) -> bool:
    """``record`` is the tombstone right after its delete ``before`` in the same partition:
    the delete, sent already, says all the tombstone would (the common pair, sent once)."""
    return (
        record.value is None
        and before is not None
        and before.value is not None
        and before.value.get("op") == "d"
        and before.offset == record.offset - 1
        and before.partition == record.partition
        and before.topic == record.topic
        and before.pos == record.pos
        and before.key == record.key
    )


def message_id(batch: Sequence[Entry]) -> str:
    """The batch's ``webhook-id`` and ``Idempotency-Key``: a hash of every record id in order,
    so a retry of the same batch carries the same one and any other batch another (after a
    restart, batches can interleave partitions differently: the same first and last records
    and length may frame other records, which a receiver de-duplicating by this id would drop).
    """
    digest = hashlib.sha256()
    for entry in batch:
        data = entry.id.encode()
        # Each id after its length: two different lists of ids never hash the same bytes.
        digest.update(len(data).to_bytes(4, "big"))
        digest.update(data)
    return "msg_" + digest.hexdigest()[:32]


def body(pipeline: str, sink: str, batch: Sequence[Entry]) -> bytes:
    """The request body: ``{"pipeline", "sink", "records": [...]}``, records in log order."""
    head = orjson.dumps({"pipeline": pipeline, "sink": sink})[:-1]
    return b"".join((head, b',"records":[', b",".join(e.json for e in batch), b"]}"))
