"""What a source connector implements, and what the runtime hands it.

Contract (after Bytewax's resumable sources): offsets mean "everything up to and including this
is done". The runtime stores a batch's ``commit_offsets`` in the same log transaction as the
batch's records and every uncommitted record before it, and only then calls :meth:`Source.ack`.
Offsets are :data:`~cdc.contracts.positions.Offsets`: the source's plain JSON, which may carry its
typed position (:class:`~cdc.contracts.positions.PositionedOffsets`, reached with
:func:`~cdc.contracts.positions.position_in`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog
from pydantic import BaseModel

from cdc.contracts.events import ChangeEvent
from cdc.contracts.positions import Offsets
from cdc.contracts.schema import TableSchema
from cdc.envelope.options import EnvelopeOptions
from cdc.log.base import Log, Record
from cdc.transforms.chain import EMPTY, TransformChain


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A change the source could not convert, kept with the reason instead of dropped."""

    table: str
    key: dict[str, Any] | None
    reason: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SourceBatch:
    """What one ``poll`` returns.

    Attributes:
        events: changes in commit order.
        commit_offsets: when not ``None``, the batch ends a unit of work (a source transaction,
            a snapshot chunk, an idle keepalive): the runtime commits the log transaction with
            these offsets stored, then acks them. ``None`` means more of the same transaction
            follows; its records are appended but not yet committed.
        schemas: table shapes to publish before ``events``.
        dead_letters: changes that could not be converted, under the ``dead_letter`` policy.
        records: changes the source wrote as records itself, as
            :func:`cdc.envelope.encode.to_records` would have (a snapshot's rows, written in bulk by
            its readers; a stream's changes, when :attr:`SourceContext.write_records` lets it);
            appended after the records of ``events``, in order. Their top-level ``ts_ms`` is
            when the source wrote them, so with parallel readers it need not grow in log order
            (Debezium's meaning too: when the connector processed the change).
        record_ops: the operation of each of ``records`` (``c``, ``u``, ``d``, ``r``, ``t``;
            ``""`` for a delete's tombstone), for the metrics; ``None``: they are all snapshot
            rows (``r``).
        ts_ms: the source's commit time of the last change among ``records`` (the lag clock's,
            as ``events``' ``source.ts_ms``); ``None``: none to tell (snapshot rows).
    """

    events: Sequence[ChangeEvent] = ()
    commit_offsets: Offsets | None = None
    schemas: Sequence[TableSchema] = ()
    dead_letters: Sequence[DeadLetter] = field(default_factory=tuple)
    records: Sequence[Record] = ()
    record_ops: Sequence[str] | None = None
    ts_ms: int | None = None

    @property
    def empty(self) -> bool:
        return not (self.events or self.records or self.schemas or self.dead_letters) and (
            self.commit_offsets is None
        )


@dataclass(frozen=True)
class SourceContext:
    """What the runtime gives a source when building it.

    Attributes:
        transforms: the pipeline's transforms. The runtime applies them to a batch's
            ``events`` and ``schemas``; a source that writes ``records`` itself (a snapshot's
            rows) runs those rows through :meth:`TransformChain.apply` first, and a source that
            pre-encodes events (:attr:`ChangeEvent.encoded`) does not while there are any.
        resnapshot: ``schema.table`` of the tables to re-read while streaming at this start,
            because the transforms or their filters changed (``on_transform_change:
            resnapshot``).
        refiltered: those of them whose own entry (columns, masks, row filter, ops) changed:
            a source may delete the rows a changed row filter now leaves out.
        write_records: the runtime appends a stream's changes the source writes as
            ``records`` itself (:attr:`SourceBatch.record_ops`, :attr:`SourceBatch.ts_ms`): a
            source may do so where no transform and no transaction block needs them as events,
            and must then leave out the operations the table's ``ops`` and the envelope's
            ``skipped.operations`` do not write. ``False``: events only (a caller that reads
            them, as the tests of a source do).
    """

    pipeline: str
    log: Log
    logger: structlog.typing.FilteringBoundLogger
    on_bad_record: str = "fail"  # "fail" | "dead_letter"
    snapshot_mode: str = "initial"
    envelope: EnvelopeOptions = field(default_factory=lambda: EnvelopeOptions.model_validate({}))
    transforms: TransformChain = EMPTY
    resnapshot: tuple[str, ...] = ()
    refiltered: tuple[str, ...] = ()
    write_records: bool = False


class Source(Protocol):
    """A source connector: reads changes in commit order."""

    def tables(self) -> list[tuple[str, str]]:
        """``(schema, table)`` of every captured table, so their topics exist up front."""
        ...

    def open(self, stored_offsets: Offsets) -> None:
        """Connect and resume after ``stored_offsets`` (empty on a first start; as the log read
        them back, so they carry no position: decode it with ``position_in``)."""
        ...

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        """At most ``max_events`` events, blocking at most ``timeout_s``."""
        ...

    def ack(self, offsets: Offsets) -> None:
        """The offsets are durable in the log: the source may release what they cover (they are
        a batch's ``commit_offsets`` as the source handed them on, position included)."""
        ...

    def close(self) -> None: ...


class SourcePlugin(Protocol):
    """What a ``cdc.sources`` entry point names.

    Optional, for ``cdc verify``: ``read_rows(config, schema, table, *, envelope)``, an
    iterator of ``(key, row)`` of every current row of the table, as the pipeline's records
    under ``envelope`` (:class:`~cdc.envelope.options.EnvelopeOptions`) shape them.

    Optional, for ``cdc doctor``: ``doctor(config, pipeline_name)``, a list of
    :class:`cdc.contracts.checks.Check`, one per precondition of a start (server settings,
    privileges, replication objects), each ok or with the exact fix. It changes nothing, and reports
    an unreachable server as a failed check rather than raising.

    Optional, for the sinks: ``record_rows(topic, key, value) -> (key, value)``, when the
    source's records are not rows as they are (MongoDB's ``before``/``after`` are Extended JSON
    texts): the runtime hands it to every sink task, which applies it to each decoded record
    (:data:`cdc.runtime.sink_task.RecordRows`).
    """

    config_model: type[BaseModel]

    @staticmethod
    def create(config: Any, context: SourceContext) -> Source: ...
