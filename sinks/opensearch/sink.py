"""The OpenSearch sink: one index per source table, one document per key, kept current.

``write`` only buffers. ``flush`` makes sure each table's index exists with the mapping of its
published schema (:mod:`.indexes`), sends each key's newest change of the batch with the Bulk
API under an external version derived from its source position (:mod:`.versions`), and, once
every item is acknowledged, stores the next offsets in the offsets index (:mod:`.offsets`).
After a crash the runner resumes from :meth:`stored_offsets`: a change sent again meets its own
version (or a newer one) and is refused with a 409, which counts as done. No change is lost,
and none takes effect twice or out of order.

The sink also reads the pipeline's schema topic (``reads_schemas``): a table published but with
no rows yet gets its index.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

from opensearchpy import OpenSearch

from cdc.contracts.errors import CdcError, SinkFatal
from cdc.contracts.schema import schema_topic
from cdc.contracts.sink import SinkContext, SinkRecord, sink_offsets
from cdc.log.base import TopicPartition
from sinks.keyed import Change, Table, TopicTables, classify, split_schemas
from sinks.opensearch import bulk, indexes, offsets
from sinks.opensearch.client import connect, translate
from sinks.opensearch.config import OpenSearchSinkConfig
from sinks.opensearch.documents import Part, action, older_than, parts
from sinks.opensearch.indexes import IndexState


class OpenSearchSink:
    """Keeps one OpenSearch index per table equal to the source rows."""

    reads_schemas = True

    def __init__(self, config: OpenSearchSinkConfig, context: SinkContext) -> None:
        self._config = config
        self._context = context
        self._name = context.sink_name
        self._schema_topic = schema_topic(context.pipeline)
        self._tables = set(context.tables)
        self._topic_tables = TopicTables(context.pipeline, context.tables, context.schemas)
        self._client: OpenSearch | None = None
        self._indexes: dict[Table, IndexState] = {}
        self._offsets: dict[TopicPartition, int] = {}
        self._pending: list[SinkRecord] = []
        self._held: str | None = None  # the source position to store with the next offsets
        self._log = context.logger

    def open(self) -> None:
        """Reach the cluster, create the offsets index if missing and read the offsets.

        Raises:
            SinkUnavailable: the cluster cannot be reached now.
            SinkFatal: it refuses the credentials or the sink's requests.
        """
        self._client = connect(self._config)
        try:
            with self._translated("opening"):
                offsets.ensure(self._client, self._config.offsets_index)
                self._offsets = self._load_offsets()
        except BaseException:
            self.close()
            raise
        self._log.info("opensearch.opened", url=self._config.url)

    def stored_offsets(self) -> Mapping[TopicPartition, int]:
        """The offsets as stored now (another worker may have moved a partition on)."""
        if self._client is not None:
            with self._translated("reading the offsets"):
                self._offsets = self._load_offsets()
        return dict(self._offsets)

    def write(self, records: Sequence[SinkRecord]) -> None:
        self._pending.extend(records)

    def set_consistent_position(self, position: str) -> None:
        """Store ``position`` after the next flush's offsets, in their bulk request
        (:class:`cdc.contracts.sink.PositionedSink`)."""
        self._held = position

    def flush(self) -> None:
        """Send everything written since the last flush, then store the offsets.

        Raises:
            RecordError: a record that cannot be applied (the batch may be sent again).
            SinkFatal: an incompatible schema change, or a cluster that refuses the sink.
            SinkUnavailable: the cluster went away or is overloaded (send the batch again).
        """
        records, self._pending = self._pending, []
        held, self._held = self._held, None
        if not records:
            if held is not None and self._offsets:  # idle: the position alone
                with self._translated("storing the consistent position"):
                    self._store_offsets({}, held)
            return
        data, announced, _ = split_schemas(records, self._schema_topic, self._tables)
        changes = [classify(record, self._topic_tables) for record in data]
        with self._translated("applying a batch"):
            for table in announced:
                self._index(table)
            for part in parts(changes, self._topic_tables.any_type_key):
                self._send(part)
            next_offsets = sink_offsets(records)
            self._store_offsets(next_offsets, held)
        self._offsets.update(next_offsets)

    def close(self) -> None:
        self._pending = []
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    def reset_table(self, table: Table, partitions: Sequence[TopicPartition]) -> None:
        """Drop the table's index, store offset 0 for each of ``partitions`` and create the
        index again, empty, from the table's published schema.

        Raises:
            SinkFatal: the sink is not open, or the cluster refused.
        """
        client = self._connected()
        with self._translated(f"resetting {table[0]}.{table[1]}"):
            name = self._index_name(table)
            indexes.drop(client, name)
            self._indexes.pop(table, None)
            pipeline, index = self._context.pipeline, self._config.offsets_index
            topics = {tp.topic for tp in partitions}
            # First: the table is read again from its start, its data no longer holds it.
            offsets.forget_position(client, index, pipeline, self._name)
            self._held = None
            offsets.forget_topics(client, index, pipeline, self._name, topics)
            offsets.store(client, index, pipeline, self._name, {tp: 0 for tp in partitions})
            self._index(table)
            self._offsets = self._load_offsets()
        self._log.info("opensearch.table_reset", table=f"{table[0]}.{table[1]}", index=name)

    # -- internals ---------------------------------------------------------------------------

    def _connected(self) -> OpenSearch:
        if self._client is None:
            raise SinkFatal(f"OpenSearch sink {self._name}: used before open")
        return self._client

    def _store_offsets(self, next_offsets: Mapping[TopicPartition, int], held: str | None) -> None:
        pipeline, index = self._context.pipeline, self._config.offsets_index
        offsets.store(self._connected(), index, pipeline, self._name, next_offsets, held)

    def _load_offsets(self) -> dict[TopicPartition, int]:
        pipeline, index = self._context.pipeline, self._config.offsets_index
        return offsets.load(self._connected(), index, pipeline, self._name)

    def _send(self, part: Part) -> None:
        """One part's documents, then its truncate (if it ends in one)."""
        actions = []
        states: dict[Table, IndexState] = {}
        for (table, doc), change in part.latest.items():
            state = states.get(table)
            if state is None:
                state = states[table] = self._index(table)
            if not older_than(change.pos, state.watermark):
                source = state.schema.connector if state.schema is not None else None
                actions.append(action(state.name, doc, change, source))
        config = self._config
        bulk.send(self._connected(), actions, config.refresh, config.bulk_bytes)
        if part.truncate is not None:
            self._truncate(part.truncate)

    def _truncate(self, change: Change) -> None:
        """Drop and create the table's index again, remembering the truncate's position."""
        state = self._index(change.table)
        if older_than(change.pos, state.watermark):
            return  # a replayed truncate the index already went through
        client = self._connected()
        indexes.drop(client, state.name)
        published = self._context.schemas.get(*change.table)
        envelope = self._context.envelope
        indexes.create(client, self._config, state.name, published, envelope, change.pos)
        columns = indexes.column_ids(published)
        self._indexes[change.table] = IndexState(state.name, change.pos, published, columns)
        self._log.info("opensearch.truncated", index=state.name, pos=list(change.pos or ()))

    def _index(self, table: Table) -> IndexState:
        """The table's index, created or its mapping extended when its published schema is new
        to this sink."""
        published = self._context.schemas.get(*table)
        state = self._indexes.get(table)
        if state is not None and state.schema == published:
            return state
        client, envelope = self._connected(), self._context.envelope
        name = state.name if state is not None else self._index_name(table)
        exists, watermark, columns = indexes.load(client, name)
        if not exists:
            indexes.create(client, self._config, name, published, envelope, None)
            exists, watermark, columns = indexes.load(client, name)
        state = IndexState(name, watermark, published, columns)
        if published is not None and exists:
            indexes.evolve(client, state, published, envelope, self._name)
        self._indexes[table] = state
        return state

    def _index_name(self, table: Table) -> str:
        try:
            return self._config.index_name(self._context.pipeline, table)
        except ValueError as exc:
            raise SinkFatal(f"OpenSearch sink {self._name}: index template: {exc}") from exc

    @contextlib.contextmanager
    def _translated(self, doing: str) -> Iterator[None]:
        """A client error as the framework's; what is known of the indexes is read again after
        a failure (another worker, or a half-done truncate, may have changed them)."""
        try:
            yield
        except CdcError:
            self._indexes = {}
            raise
        except Exception as exc:
            self._indexes = {}
            raise translate(exc, self._config, doing) from exc
