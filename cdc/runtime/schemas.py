"""The schema catalog sinks read: the latest :class:`TableSchema` of each table.

It follows the pipeline's schema topic incrementally. A source appends a table's schema in the
same transaction as, and before, the first change with that shape, so by the time a sink sees a
change, the matching schema is readable here.
"""

from __future__ import annotations

import threading

import orjson

from cdc.contracts.schema import TableSchema, is_table_schema_key, schema_topic
from cdc.log.base import Log
from cdc.log.encoding import is_encoding_key
from cdc.support.clock import SYSTEM_CLOCK, Clock
from cdc.support.wait import WaitTimeout, wait_until


class SchemaCatalog:
    """Latest schema per ``(schema, table)``, refreshed from the schema topic on demand.

    Args:
        source_shapes: read the source tables' own shapes (what a source compares a table's
            next shape with) instead of the published ones: where transforms changed a table's
            shape or name, the source's own is kept beside it
            (:func:`cdc.contracts.schema.source_shape_record`).
    """

    def __init__(
        self,
        log: Log,
        pipeline: str,
        wait_s: float = 5.0,
        source_shapes: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._log = log
        self._wait_s = wait_s
        self._clock = clock
        self._source_shapes = source_shapes
        self._topic = schema_topic(pipeline)
        self._next: dict[int, int] = {}
        self._schemas: dict[tuple[str, str], TableSchema] = {}
        # Tables already waited for in vain: asked again (every batch), they are looked up once,
        # not waited for again, or a table without a schema would stall each batch.
        self._waited: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def get(self, schema: str, table: str) -> TableSchema | None:
        """The newest known schema of ``schema.table``, or ``None`` if none was published.

        Sources publish a table's schema in the same log transaction as, and before, its first
        change; but Kafka makes a transaction visible partition by partition, so a sink can see
        the change a moment before the schema. A missing schema is therefore waited for, briefly.
        """
        name = (schema, table)
        wait_s = 0.0 if name in self._waited else self._wait_s
        try:
            return wait_until(lambda: self._read(name), wait_s, 0.05, clock=self._clock)
        except WaitTimeout:
            self._waited.add(name)
            return None

    def _read(self, name: tuple[str, str]) -> TableSchema | None:
        with self._lock:
            self._refresh()
            return self._schemas.get(name)

    def _refresh(self) -> None:
        if not self._next and not self._topic_exists():
            return  # a pipeline just started has not created its schema topic yet
        for partition, end in self._log.end_offsets(self._topic).items():
            offset = self._next.get(partition, 0)
            while offset < end:
                records = self._log.read(self._topic, partition, offset, 1000)
                if not records:
                    break
                for record in records:
                    self._take(record.key, record.value)
                offset = records[-1].offset + 1
            self._next[partition] = offset

    def _take(self, key: bytes | None, value: bytes | None) -> None:
        if value is None or is_encoding_key(key):
            return
        data = orjson.loads(value)
        if self._source_shapes:
            if data.get("transformed"):
                return  # a transformed shape: the source's own is in its source_shape record
        elif not is_table_schema_key(key):
            return  # a source's own shape: not what its records look like
        parsed = TableSchema.from_json(data)
        self._schemas[(parsed.schema, parsed.table)] = parsed

    def _topic_exists(self) -> bool:
        return any(info.name == self._topic for info in self._log.topics())
