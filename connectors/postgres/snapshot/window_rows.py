"""The ``r`` records of a closed watermark window, and the chunk job a window reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdc.contracts.events import SourceInfo
from cdc.envelope.connect_schema import TableSchemas
from cdc.envelope.encode import order_json, row_json
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.log.base import Record
from cdc.transforms.chain import EMPTY
from connectors.postgres.assembly.relation_state import CONNECTOR
from connectors.postgres.assembly.source_fields import PG_TAIL, lsn_fields, pg_order
from connectors.postgres.snapshot.reader import SnapshotTable
from connectors.postgres.snapshot.rows import (
    SEQUENCE_SHIFT,
    KeyedRow,
    Transforms,
    event_records,
    read_template,
)
from snapshots.chunks import Chunk


@dataclass(frozen=True, slots=True)
class ChunkJob:
    """One chunk to read between watermarks, for request ``request``; ``purge``: the chunk's
    rows the table's row filter leaves out are read too, and deleted (a re-read after the
    filter changed: rows it no longer accepts may be in the sinks); ``keys``: a repair's keys
    (``cdc verify --repair``), each read not found in the chunk's range is deleted."""

    table: SnapshotTable
    chunk: Chunk
    where: str | None
    request: str | None = None
    purge: bool = False
    keys: tuple[dict[str, Any], ...] = ()


def window_records(
    job: ChunkJob,
    rows: list[KeyedRow],
    *,
    pipeline: str,
    db: str,
    position: int,
    ts_ms: int,
    now_ms: int,
    schemas: TableSchemas | None = None,
    options: EnvelopeOptions = READABLE,
    transforms: Transforms | None = None,
) -> list[Record]:
    """The ``r`` records of a closed window, at the high watermark's position: each row's JSON
    put in the window's :class:`~cdc.envelope.encode.RecordTemplate`, its ``source`` head encoded
    once (with ``transforms``, each row's event through them: :func:`.rows.event_records`).
    """
    first = job.chunk.index << SEQUENCE_SHIFT
    # As Debezium writes an incremental snapshot's rows: no lsn (nor txId) of their own, and a
    # sequence at the stream's position when the window closed.
    if transforms or job.purge or job.keys:
        info = job.table.info
        source = SourceInfo(
            CONNECTOR, db, info.schema, info.table, ts_ms, position, 0, "incremental"
        )
        source.extra, source.order = lsn_fields(None), pg_order(position, position)
        chain = transforms or Transforms(EMPTY)
        return event_records(job.table, rows, source, first, pipeline, now_ms, options, chain)
    template = read_template(db, job.table, position, "incremental", ts_ms, pipeline, schemas)
    topic, extra = job.table.state.topic, b',"lsn":null%b' % PG_TAIL
    order = order_json(pg_order(position, position))
    value, pos = template.value, template.pos
    wrap = schemas.wrap_key if schemas is not None else _same
    return [
        Record(topic, wrap(key_json), value(row_json(after), order, extra, now_ms), pos(sequence))
        for sequence, (after, key_json) in enumerate(rows, first)
    ]


def _same(key: bytes) -> bytes:
    return key
