"""What a sink implements, and what the runtime hands it.

Checkpoint order (after Quix Streams), enforced by :mod:`cdc.runtime.sink_task`: ``write`` the
records, ``flush`` (durable on return), and only then commit the consumer offsets. A sink that
stores offsets with its data (exactly-once sinks) returns them from :meth:`Sink.stored_offsets`
and the runner starts from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from pydantic import BaseModel

from cdc.log.base import TopicPartition
from cdc.schema import TableSchema


@dataclass(frozen=True, slots=True)
class SinkRecord:
    """A decoded record: ``key`` and ``value`` are JSON objects, ``value`` None for a tombstone."""

    topic: str
    partition: int
    offset: int
    key: dict[str, Any] | None
    value: dict[str, Any] | None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


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
        """Make everything written durable. On return, the runner commits the offsets."""
        ...

    def close(self) -> None: ...


class SinkPlugin(Protocol):
    """What a ``cdc.sinks`` entry point names."""

    config_model: type[BaseModel]

    @staticmethod
    def create(config: Any, context: SinkContext) -> Sink: ...


def sink_offsets(records: Sequence[SinkRecord]) -> dict[TopicPartition, int]:
    """The next offset to read per partition after ``records``."""
    offsets: dict[TopicPartition, int] = {}
    for record in records:
        offsets[record.tp] = record.offset + 1
    return offsets
