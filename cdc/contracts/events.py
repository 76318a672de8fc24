"""The change event: what a source emits, before it is encoded for a topic.

Events are plain slotted dataclasses: they sit on the hot path, so no validation happens here.
They are not ``frozen``, though nothing changes them once built: a frozen dataclass's
``__init__`` sets each field through ``object.__setattr__``, which made building a
:class:`SourceInfo` and its :class:`ChangeEvent` cost about 1.8 µs per change, a tenth of the
PostgreSQL source's whole per-row cost (py-spy on ``bench/pg_stream.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc.envelope.connect_schema import TableSchemas


#: A record a source already wrote for an event (:attr:`ChangeEvent.encoded`):
#: ``(pipeline, topic, key JSON, value up to its top-level ts_ms number, its closing, its
#: position)``: the position is :func:`cdc.envelope.encode.write_pos` of the event's source, written
#: by the source with the value. A plain tuple, not a named one: one is built per streamed change,
#: and a ``NamedTuple`` costs eight times more.
PreEncoded = tuple[str, str, bytes, bytes, bytes, bytes]


class Op(StrEnum):
    """Debezium's operation codes."""

    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"  # a snapshot row
    TRUNCATE = "t"


Row = dict[str, Any]


@dataclass(slots=True)
class SourceInfo:
    """Where and when a change happened; becomes the envelope's ``source`` block.

    Attributes:
        connector: ``postgresql``, ``mongodb``, ``generator``...
        db: database name.
        schema: schema (PostgreSQL) or database (MongoDB) of the table.
        table: table or collection name.
        ts_ms: commit time in the source, milliseconds since the epoch.
        position: the source position of the change's transaction, ordered in commit order
            (PostgreSQL: the commit LSN as an int).
        sequence: the change's index within its transaction; ``(position, sequence)`` orders
            all changes of a source totally, so sinks compare it to skip replays.
        snapshot: ``"false"`` while streaming; ``"true"``, ``"first"``, ``"last"`` or
            ``"incremental"`` for snapshot rows, as Debezium writes it.
        tx_id: the source transaction id, when there is one.
        extra: connector-specific fields added to the ``source`` block verbatim, after
            ``txId`` (PostgreSQL: ``lsn``, ``xmin``, ``origin``, ``origin_lsn``).
        ts_us: commit time in microseconds (``source.ts_us``; ``ts_ns`` is it times 1000);
            ``None``: ``ts_ms`` times 1000.
        order: Debezium's ``source.sequence``, a JSON text the connector writes (PostgreSQL:
            ``["<last commit lsn>","<lsn>"]``); ``None`` writes null.
        table_fields: the block has ``schema``, ``table`` and ``txId`` before ``extra``;
            ``False`` for a connector whose ``extra`` holds all its own fields (MongoDB's
            ``collection``, ``ord``...), written right after ``ts_ns``.
    """

    connector: str
    db: str
    schema: str
    table: str
    ts_ms: int
    position: int
    sequence: int = 0
    snapshot: str = "false"
    tx_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    ts_us: int | None = None
    order: str | None = None
    table_fields: bool = True


@dataclass(slots=True)
class ChangeEvent:
    """One row-level change.

    ``key`` holds the primary-key columns in key order. ``before`` is the old image where the
    source has it (deletes, updates with a full replica identity); ``after`` the new image.
    ``after`` may be any mapping (a source can hand over a row it wrote already, see
    :class:`cdc.envelope.encode.EncodedRow`), and ``encoded`` the record it wrote for the event,
    when it did: both are the envelope module's business (:data:`PreEncoded`).

    ``fields`` are connector-specific top-level fields written after ``after`` (MongoDB's
    ``updateDescription``); ``transaction`` is the ``transaction`` block
    (``provide.transaction.metadata``), filled by the runtime; ``connect`` the table's cached
    Connect schemas (:class:`cdc.envelope.connect_schema.TableSchemas`) for ``schemas.enable``, from
    the source, which knows the column types (``None``: inferred from the values).
    ``destination`` is the ``(schema, table)`` whose topic the event goes to when a transform
    routed it elsewhere (``None``: its own table's, :attr:`topic_table`).
    """

    op: Op
    key: Row
    before: Row | None
    after: Mapping[str, Any] | None
    source: SourceInfo
    encoded: PreEncoded | None = None
    fields: dict[str, Any] | None = None
    transaction: dict[str, Any] | None = None
    connect: TableSchemas | None = None
    destination: tuple[str, str] | None = None

    @property
    def table_id(self) -> str:
        """``schema.table`` of the changed table."""
        return f"{self.source.schema}.{self.source.table}"

    @property
    def topic_table(self) -> tuple[str, str]:
        """``(schema, table)`` of the topic the event goes to."""
        destination = self.destination
        return destination if destination is not None else (self.source.schema, self.source.table)


def topic_name(pipeline: str, schema: str, table: str) -> str:
    """The topic of a table: ``<pipeline>.<schema>.<table>`` (DESIGN.md contract)."""
    return f"{pipeline}.{schema}.{table}"
