"""What a sink implements, and what the runtime hands it.

Checkpoint order (after Quix Streams), enforced by :mod:`cdc.runtime.sink_task`: ``write`` the
records, ``flush`` (durable on return), and only then commit the consumer offsets. A sink that
stores offsets with its data (exactly-once sinks) returns them from :meth:`Sink.stored_offsets`
and the runner starts from there.

A sink whose class sets ``reads_schemas = True`` is also handed the records of the pipeline's
schema topic (``<pipeline>.__schemas``: key ``{"schema", "table"}``, value a
:class:`~cdc.contracts.schema.TableSchema` as JSON), in the same batches and under the same
checkpoint order, so it can create a table the source published but has no rows for yet. The topic
also holds the log's stored envelope encoding, under the key ``{"kind": "encoding"}``
(:func:`cdc.log.encoding.is_encoding_key`), which is no table's schema.

A delete (``op`` ``"d"``) is applied by its record key, and only by it. Its ``before`` is not a
row: under PostgreSQL's REPLICA IDENTITY DEFAULT it holds the key and, as Debezium writes it, a
placeholder (``0``, ``""``, ``false``, ``[]``) for every other NOT NULL column, values the row
never had and a typed column may refuse. A sink that keeps rows never stores, casts or matches
on them; one that keeps every version records a delete as a tombstone version: the key, NULL
elsewhere (a sink that writes the records themselves, as jsonl, writes the envelope as the log
holds it). The conformance kit (:class:`cdc.testing.conformance.SinkConformance`) checks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel

from cdc.contracts.schema import TableSchema
from cdc.envelope.encode import record_pos
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.log.base import TopicPartition
from cdc.log.eras import Era

if TYPE_CHECKING:  # annotations only: a sink's config module (a file's read) sets up no logging
    import structlog


@dataclass(frozen=True, slots=True)
class SinkRecord:
    """A decoded record: ``key`` and ``value`` are JSON objects, ``value`` None for a tombstone.

    A tombstone's :attr:`pos` is its delete's: a sink that reads it without the delete (which
    compaction may have removed while the sink was behind) applies it as that delete. One
    written before tombstones carried a position has none, and is skipped."""

    topic: str
    partition: int
    offset: int
    key: dict[str, Any] | None
    value: dict[str, Any] | None
    era: Era | None = None
    """The encoding the record was written under (:mod:`cdc.log.eras`); ``None``: not known,
    the pipeline's (:attr:`SinkContext.envelope`). Use :func:`record_options`."""
    pos: bytes | None = None
    """The record's source position as the log keeps it beside the value
    (:attr:`cdc.log.base.StoredRecord.pos`); read it with :attr:`position`."""

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def position(self) -> tuple[Any, Any]:
        """``(position, sequence)``: what a sink orders and de-duplicates a key's changes by.
        A record appended before the log kept the position beside the value has it in the
        value's ``source.pos``, which is read then (:func:`cdc.envelope.encode.record_pos`); each
        sink checks the types its policy needs.

        Raises:
            KeyError, TypeError, ValueError: no position (a tombstone written before
                tombstones carried their delete's position has none), or not a pair.
        """
        return record_pos(self.pos, self.value)


class SchemaLookup(Protocol):
    def get(self, schema: str, table: str) -> TableSchema | None: ...


@dataclass(frozen=True)
class SinkContext:
    """What the runtime gives a sink when building it."""

    pipeline: str
    sink_name: str
    tables: Sequence[tuple[str, str]]
    schemas: SchemaLookup
    logger: structlog.typing.FilteringBoundLogger
    envelope: EnvelopeOptions = READABLE
    """The pipeline's envelope options: how record values are encoded (decode them with
    :func:`cdc.records.values.decoder`). Keys and values reach the sink without the ``{"schema",
    "payload"}`` wrapper of ``schemas.enable``. After an accepted envelope change a topic's
    older records are in another encoding: each record's :attr:`SinkRecord.era` says which
    (:func:`record_options`)."""
    hidden: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    """By table, the columns whose values the configuration masks: an error may name them,
    never print their values (a column it leaves out never reaches a sink)."""


def record_options(record: SinkRecord, context: SinkContext) -> EnvelopeOptions | None:
    """The options ``record`` was written under (``None``: the legacy encoding)."""
    era = record.era
    return context.envelope if era is None else era.options


class Sink(Protocol):
    """A sink: keeps a derived store in sync with the topics it is given."""

    def open(self) -> None:
        """Connect; raise a clear error (``SinkFatal`` or ``SinkUnavailable``) when it can't."""
        ...

    def stored_offsets(self) -> Mapping[TopicPartition, int] | None:
        """Next offsets to read, if the sink keeps them with its data; else ``None``."""
        ...

    def write(self, records: Sequence[SinkRecord]) -> None: ...

    def flush(self) -> None:
        """Make everything written durable. On return, the runner commits the offsets.

        A sink that keeps its offsets with its data may instead commit on its own schedule
        (Iceberg, every ``commit_interval_s``): it then has ``durable_offsets()``, the next
        offsets its store holds durably, and the runner commits its consumer group no further
        (they are what ``cdc status``'s lag, ``cdc verify``'s lag check and ``cdc wait`` read),
        and again when they move while it is idle (its ``probe()`` committed)."""
        ...

    def close(self) -> None: ...

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        """Forget ``table`` so it is rebuilt from the log (``cdc sink FILE NAME --reset-table``).

        Drop everything the sink holds for the table (its rows, any shape it recorded, the
        position guards of its keys) and make the next offset of each of ``partitions`` (every
        partition of the table's topic) 0, durably, before returning: the runner then reads the
        topic again from its start, and the compacted log rebuilds the table. The runner calls
        it right after ``open`` or between batches (nothing written and not flushed), never
        while a batch is pending. Idempotent: a reset interrupted by a crash is done again.
        """
        ...


@runtime_checkable
class PositionedSink(Sink, Protocol):
    """A sink that stores, beside its offsets, the source position its data is consistent up
    to (optional: a sink without :meth:`set_consistent_position` works as before).

    The position is the text ``cdc status`` and ``/readyz`` print (``str`` of the source's
    position; the source plugin's ``parse_position`` reads it back). Read it back for ``cdc
    status`` through the plugin's optional ``read_consistent_position``
    (:class:`SinkPlugin`).
    """

    def set_consistent_position(self, position: str) -> None:
        """Store ``position`` with the offsets of the next :meth:`flush`, in the same
        transaction (or atomic write): once that flush returns, the store holds every change
        up to it. A flush that fails forgets it (the runner hands it again with the retry).
        A flush with no records written stores it alone, the offsets as they are, provided
        the store already holds offsets; a :meth:`reset_table` forgets the stored one.
        """
        ...


class SinkPlugin(Protocol):
    """What a ``cdc.sinks`` entry point names.

    Optional, for ``cdc verify``: ``read_rows(config, schema, table, *, pipeline)``, an iterator
    of ``(key, row)`` of every row the sink holds for ``schema.table``, where ``pipeline`` is the
    pipeline's name (a sink that keys its store by pipeline, like Redis, needs it).

    Optional, for ``cdc trace``: ``read_key(config, schema, table, key, *, pipeline,
    any_type)``, what the sink holds for one record key (``key`` the record key's JSON object, in
    key-column order; ``any_type``: the table's key column has no type, so may hold the number 5
    and the string "5" as two keys, as a MongoDB ``_id`` may):
    ``(row, (position, sequence))``, the row and the source position the store recorded with it
    (``None`` where it keeps none); ``(None, position)`` for a deleted key whose position the
    store keeps; ``None`` when it holds nothing of the key; ``NotImplementedError`` for a table
    it cannot look keys up in. Without it, ``cdc trace`` reads ``read_rows`` and infers the
    version held by comparing rows with the log's versions.

    Optional, for ``cdc doctor``: ``doctor(config, pipeline_name)``, a list of
    :class:`cdc.contracts.checks.Check`: whether the store can be reached and written (cheaply; a
    probe it writes is removed again), each ok or with the exact fix.

    Optional, for ``cdc status``: ``read_consistent_position(config, *, pipeline)``, the
    position a :class:`PositionedSink` stored with its offsets (``None``: none stored), read
    from the store without the pipeline running.

    Optional, for scale-out on Kafka: ``single_writer`` (a class attribute, default ``False``).
    ``True`` says the store takes one writer at a time (a DuckDB file, a Tantivy index; an
    Iceberg table's one committer): of the sink's ``cdc sink`` workers, only the one that holds
    the sink's lease opens the store and reads the log, and the others stand by until it dies
    (:mod:`cdc.runtime.standby`). ``False``: every worker writes, each to the partitions Kafka
    gives it (Redis, PostgreSQL, OpenSearch, HTTP).

    Optional: ``requires``, the modules of the store's client library, for a plugin that
    imports them only when it runs (in ``create`` and the readers): loading the plugin looks
    for each without importing it, and a missing one is the config error with the ``pip
    install`` command (:mod:`cdc.contracts.plugins`).
    """

    config_model: type[BaseModel]

    @staticmethod
    def create(config: Any, context: SinkContext) -> Sink: ...


def sink_offsets(records: Sequence[SinkRecord]) -> dict[TopicPartition, int]:
    """The next offset to read per partition after ``records``."""
    # Plain tuples in the loop: a TopicPartition a record (and the tp property's call) shows
    # on every sink's hot path; they hash and compare alike.
    latest: dict[tuple[str, int], int] = {}
    for record in records:
        latest[record.topic, record.partition] = record.offset + 1
    return {TopicPartition(*tp): offset for tp, offset in latest.items()}
