"""A deterministic change generator.

Change number ``n`` is a pure function of ``(seed, n)``, so the stream is resumable from a
stored ``n`` with no state of its own: after a crash it continues exactly where the log's stored
offset says, which makes it a good source for crash tests of the runtime and sinks.

Changes come in transactions of ``transaction_size``; the first ``keys`` changes of a table
create its rows, later ones update (80%) or delete (20%) a random key, and an update of a
deleted key re-creates it (an upsert), as a sink would apply it anyway.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field

from cdc.config.models import SourceConfig
from cdc.contracts.errors import SourceFatal
from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.contracts.positions import Offsets, PositionedOffsets, position_in, require_forward
from cdc.contracts.schema import Column, TableSchema
from cdc.contracts.source import SourceBatch, SourceContext
from cdc.envelope.encode import to_records
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.runtime.sink_task import payload_of

OFFSET_KEY = "generator"
COLUMNS = (
    Column("id", "bigint", key=True, nullable=False),
    Column("name", "text"),
    Column("amount", "numeric(12,2)"),
    Column("updated_at", "timestamp with time zone"),
)


class Generated(int):
    """The generator's position: how many changes were handed on (``{"generator": {"next"}}``)."""

    __slots__ = ()

    @classmethod
    def from_offsets(cls, offsets: Offsets) -> Generated | None:
        entry = offsets.get(OFFSET_KEY)
        value = entry.get("next") if isinstance(entry, Mapping) else None
        return cls(value) if isinstance(value, int) else None

    def to_offsets(self) -> PositionedOffsets:
        return PositionedOffsets({OFFSET_KEY: {"next": int(self)}}, self)


class GeneratorSourceConfig(SourceConfig):
    type: Literal["generator"] = "generator"
    changes: int | None = Field(default=None, ge=0)  # None: without end
    rate: float | None = Field(default=None, gt=0)  # changes per second; None: as fast as it can
    keys: int = Field(default=1000, ge=1)
    transaction_size: int = Field(default=10, ge=1)
    seed: int = 7


class GeneratorSource:
    """Generates changes for each configured table in turn."""

    def __init__(self, config: GeneratorSourceConfig, context: SourceContext) -> None:
        self._config = config
        self._context = context
        self._tables = [tuple(t.split(".", 1)) for t in config.table_names]
        self._next = 0
        self._started = 0.0
        self._announced: set[str] = set()
        self._idle = threading.Event()
        self._acked: Generated | None = None

    def tables(self) -> list[tuple[str, str]]:
        return [(schema, table) for schema, table in self._tables]

    def open(self, stored_offsets: Offsets) -> None:
        self._next = int(stored_offsets.get(OFFSET_KEY, {}).get("next", 0))
        self._acked = None
        self._started = time.monotonic() - self._next / (self._config.rate or float("inf"))

    def poll(self, max_events: int, timeout_s: float) -> SourceBatch:
        end = self._config.changes
        size = self._config.transaction_size
        if end is not None and self._next >= end:
            self._idle.wait(timeout_s)
            return SourceBatch()
        count = min(size, max_events) if end is None else min(size, max_events, end - self._next)
        if not self._wait_for_rate(count, timeout_s):
            return SourceBatch()
        events = [self._change(n) for n in range(self._next, self._next + count)]
        self._next += count
        schemas = []
        for event in events:
            if event.table_id not in self._announced:
                self._announced.add(event.table_id)
                schemas.append(self._schema(event))
        return SourceBatch(
            events=events, commit_offsets=Generated(self._next).to_offsets(), schemas=schemas
        )

    def ack(self, offsets: Offsets) -> None:
        """Nothing to release (the stream regenerates from any position); the position may not
        move back from the previous ``ack`` of this session.

        Raises:
            PositionMovedBackwards: it did.
        """
        position = position_in(offsets, Generated)
        if position is not None:
            require_forward(self._acked, position, "acknowledged")
            self._acked = position

    def close(self) -> None:
        self._idle.set()

    def _wait_for_rate(self, count: int, timeout_s: float) -> bool:
        if self._config.rate is None:
            return True
        due = self._started + (self._next + count) / self._config.rate
        delay = due - time.monotonic()
        if delay > timeout_s:
            self._idle.wait(timeout_s)
            return False
        if delay > 0:
            self._idle.wait(delay)
        return True

    def _schema(self, event: ChangeEvent) -> TableSchema:
        return TableSchema("generator", event.source.schema, event.source.table, COLUMNS)

    def _change(self, n: int) -> ChangeEvent:
        return change(self._config, self._tables, n)


def change(config: GeneratorSourceConfig, tables: Sequence[tuple[str, ...]], n: int) -> ChangeEvent:
    """Change number ``n`` of the tables ``tables`` (``(schema, table)``, in turn)."""
    rng = random.Random(config.seed * 1_000_003 + n)
    schema, table = tables[n % len(tables)]
    per_table = n // len(tables)
    if per_table < config.keys:
        op, key = Op.CREATE, per_table
    else:
        op = Op.UPDATE if rng.random() < 0.8 else Op.DELETE
        key = rng.randrange(config.keys)
    row = None if op is Op.DELETE else _row(key, n, rng)
    source = SourceInfo(
        connector="generator",
        db="generator",
        schema=schema,
        table=table,
        ts_ms=int(time.time() * 1000),
        position=n // config.transaction_size,
        sequence=n % config.transaction_size,
        tx_id=n // config.transaction_size,
    )
    before = {"id": key} if op is Op.DELETE else None
    return ChangeEvent(op=op, key={"id": key}, before=before, after=row, source=source)


def final_rows(
    config: GeneratorSourceConfig, schema: str, table: str, envelope: EnvelopeOptions
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(key, row)`` of ``schema.table`` once every one of ``changes`` was generated, each
    row as the stream's records carry it under ``envelope``: the changes replayed.

    Raises:
        SourceFatal: the generator has no end (``changes`` unset), hence no final rows.
    """
    if config.changes is None:
        raise SourceFatal("a generator without an end (no `changes`) has no rows to verify")
    tables = [tuple(t.split(".", 1)) for t in config.table_names]
    if (schema, table) not in tables:
        return
    latest: dict[int, ChangeEvent] = {}
    for n in range(tables.index((schema, table)), config.changes, len(tables)):
        event = change(config, tables, n)
        if event.op is Op.DELETE:
            latest.pop(event.key["id"], None)
        else:
            latest[event.key["id"]] = event
    for key, event in latest.items():
        record = to_records(event, "verify", 0, envelope)[0]
        yield {"id": key}, payload_of(record.value or b"null")["after"]


def _row(key: int, n: int, rng: random.Random) -> dict[str, Any]:
    amount = Decimal(rng.randrange(0, 10_000_000)) / 100
    return {
        "id": key,
        "name": f"customer-{key}-v{n}",
        "amount": str(amount),
        "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_700_000_000 + n)),
    }


class GeneratorSourcePlugin:
    """Entry point ``generator`` of ``cdc.sources``."""

    config_model = GeneratorSourceConfig

    @staticmethod
    def create(config: GeneratorSourceConfig, context: SourceContext) -> GeneratorSource:
        return GeneratorSource(config, context)

    @staticmethod
    def read_rows(
        config: GeneratorSourceConfig,
        schema: str,
        table: str,
        *,
        envelope: EnvelopeOptions = READABLE,
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``cdc verify``: the rows after the last change (:func:`final_rows`), so a pipeline
        with a finite ``changes`` is verified once the generator has handed them all on."""
        return final_rows(config, schema, table, envelope)
