"""The Redis cache sink: one string per row, written under a version guard, exactly once.

``write`` only encodes the batch (so a bad record is reported before anything is sent);
``flush`` sends it in one pipelined round trip of ``EVALSHA`` calls (a truncate adds a few: it
scans the table). The guard lives in the script (:mod:`sinks.redis.script`), so a replayed or
late older change is skipped inside Redis, atomically with the write it guards. The last call of
a batch also stores the consumed offsets, so a batch is either fully applied with its offsets or
replayed harmlessly. With the offsets, in the same call, it stores the source position the data
is consistent up to (field ``consistent_position`` of the offsets hash,
:class:`cdc.contracts.sink.PositionedSink`). The script is loaded once and reloaded when Redis
answers ``NOSCRIPT`` (after a restart).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import redis
from redis import exceptions as rx

from cdc.contracts.events import topic_name
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.log.base import TopicPartition
from sinks.keyed import Change, Table, TopicTables
from sinks.offsets import POSITION_FIELD, decode_offsets, encode_offsets
from sinks.redis.batch import Segment, segments
from sinks.redis.config import RedisSinkConfig
from sinks.redis.connection import as_str, connect, scan_fields, translate
from sinks.redis.script import LUA, Chunk, Layout, encode_pos, offsets_args

T = TypeVar("T")
# Partitions assumed when Redis holds no offsets: start every one from 0 (a full rebuild).
ASSUMED_PARTITIONS = 1024


class RedisSink:
    """Keeps ``<prefix>:<schema>.<table>:<key>`` strings equal to the source rows."""

    def __init__(self, config: RedisSinkConfig, context: SinkContext) -> None:
        self._config = config
        self._layout = Layout(config.key_prefix or context.pipeline)
        # config.name (the context's sink name too): read_rows finds the offsets by it.
        self._sink_keys = (self._layout.offsets(config.name), self._layout.rebuild(config.name))
        self._tables = TopicTables(context.pipeline, context.tables, context.schemas)
        self._topics = [topic_name(context.pipeline, s, t) for s, t in context.tables]
        self._ttl_ms = (config.ttl_s or 0) * 1000
        self._client: redis.Redis | None = None
        self._sha = ""
        self._stored: dict[TopicPartition, int] = {}
        self._expect_offsets = False
        self._rebuild = False
        self._pending: list[Segment] = []
        self._pending_records: list[SinkRecord] = []
        self._position: str | None = None  # stored with the next flush's offsets

    def open(self) -> None:
        self._client = connect(self._config)
        self._call(self._load)
        offsets_key, rebuild_key = self._sink_keys
        stored = self._call(lambda c: c.hgetall(offsets_key))
        self._rebuild = bool(self._call(lambda c: c.exists(rebuild_key)))
        self._expect_offsets = bool(stored)
        self._stored = decode_offsets(stored)

    def stored_offsets(self) -> Mapping[TopicPartition, int]:
        """The offsets stored with the data; every partition from 0 when Redis lost the data."""
        if self._rebuild:
            return {
                TopicPartition(t, p): 0 for t in self._topics for p in range(ASSUMED_PARTITIONS)
            }
        return dict(self._stored)

    def write(self, records: Sequence[SinkRecord]) -> None:
        # Encode everything first: a bad record raises before anything is sent.
        self._pending += segments(records, self._tables)
        self._pending_records += records

    def set_consistent_position(self, position: str) -> None:
        """Store ``position`` in the offsets hash by the next flush's last script call, with
        the offsets (:class:`cdc.contracts.sink.PositionedSink`)."""
        self._position = position

    def flush(self) -> None:
        try:
            if self._pending_records:
                self._call(self._apply_pending)
                self._expect_offsets, self._rebuild = True, False
            elif self._position is not None and self._expect_offsets and not self._rebuild:
                self._call(self._store_position)
        finally:
            self._pending = []
            self._pending_records = []
            self._position = None

    def _store_position(self, client: redis.Redis) -> None:
        """The position alone, through the script: it checks the offsets hash is still there
        (a position written into a lost store would hide the loss)."""
        assert self._position is not None
        offsets = [POSITION_FIELD, self._position]
        args = Chunk().args(self._layout, self._ttl_ms, self._sink_keys, True, offsets)
        client.evalsha(self._sha, 0, *args)

    def probe(self) -> None:
        """While idle (the sink task asks now and then): raise ``SinkDataLost`` if Redis lost
        this sink's data since its last batch, so the task rebuilds it without waiting for a
        change. The script's own check does it: an empty call that stores no offsets.
        """
        if not self._expect_offsets:
            return
        args = Chunk().args(self._layout, self._ttl_ms, self._sink_keys, True, [])
        self._call(lambda client: client.evalsha(self._sha, 0, *args))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        """Delete the table's rows, their position marks and its truncate floor, then store
        offset 0 for each of ``partitions``.

        Rows and their marks go together, a page of the position hash at a time, so a reset
        cut short by a crash leaves no row without its mark, and the next attempt finds the
        rest. The offsets are written last: until then the sink would resume where it was.

        Raises:
            SinkUnavailable: Redis cannot be reached (the runner retries the reset).
        """
        # The position first: the rows it claims go next.
        self._call(lambda c: c.hdel(self._sink_keys[0], POSITION_FIELD))
        self._call(lambda client: self._forget(client, table))
        zeros = encode_offsets(dict.fromkeys(partitions, 0))
        if zeros:
            offsets_key = self._sink_keys[0]
            self._call(lambda c: c.hset(offsets_key, mapping=dict(zeros.items())))
            self._expect_offsets = True
        for tp in partitions:
            self._stored[tp] = 0

    def _forget(self, client: redis.Redis, table: Table) -> None:
        rows, positions = self._layout.rows(table), self._layout.positions(table)
        # HSCAN returns every field present from start to end of a scan, deletions meanwhile
        # notwithstanding; Redis drops the hash with its last field.
        while client.exists(positions):
            for page in scan_fields(client, positions):
                with client.pipeline(transaction=True) as tx:
                    tx.delete(*(rows + suffix for suffix in page))
                    tx.hdel(positions, *page)
                    tx.execute()
        client.delete(self._layout.truncated(table))

    def _call(self, operation: Callable[[redis.Redis], T]) -> T:
        """Run ``operation``; reload the script once on NOSCRIPT; translate driver errors."""
        assert self._client is not None, "open() first"
        try:
            try:
                return operation(self._client)
            except rx.NoScriptError:
                # Redis restarted and lost its script cache; replaying the batch is harmless.
                self._load(self._client)
                return operation(self._client)
        except rx.RedisError as exc:
            raise translate(exc, self._config) from exc

    def _load(self, client: redis.Redis) -> None:
        self._sha = str(client.script_load(LUA))

    def _apply_pending(self, client: redis.Redis) -> None:
        """Send the pending changes, segment by segment: a truncate needs the rows before it."""
        for number, segment in enumerate(self._pending, 1):
            self._send(client, segment.chunks, last=number == len(self._pending))
            if segment.truncate is not None:
                self._truncate(client, segment.truncate)

    def _send(self, client: redis.Redis, chunks: list[Chunk], last: bool) -> None:
        """One round trip: the chunks' calls, the offsets with the last call of a batch.

        The calls are all sent before the replies are read, so Redis runs one chunk's script
        while the next one is being packed and sent here.
        """
        if not last and not chunks:
            return
        chunks = chunks or [Chunk()]
        conn = client.connection_pool.get_connection()
        try:
            for number, chunk in enumerate(chunks, 1):
                offsets = self._offsets_args() if last and number == len(chunks) else []
                args = chunk.args(
                    self._layout, self._ttl_ms, self._sink_keys, self._expect_offsets, offsets
                )
                # redis-py leaves its connection methods unannotated.
                packed = conn.pack_command("EVALSHA", self._sha, 0, *args)  # type: ignore[no-untyped-call]
                conn.send_packed_command(packed)  # type: ignore[no-untyped-call]
            errors = []
            for _ in chunks:
                try:
                    conn.read_response()
                except rx.ResponseError as exc:  # read every reply before raising
                    errors.append(exc)
            if errors:
                raise errors[0]
        except BaseException:
            # Replies may be left unread: never reuse this connection.
            conn.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            client.connection_pool.release(conn)

    def _offsets_args(self) -> list[str]:
        """``HSET`` arguments of the batch's offsets, and of its position when handed one."""
        held = [] if self._position is None else [POSITION_FIELD, self._position]
        return [*offsets_args(self._pending_records), *held]

    def _truncate(self, client: redis.Redis, change: Change) -> None:
        """Delete the table's rows older than the truncate, then raise the table's floor.

        The position hash lists every key the sink wrote for the table, so scanning it costs
        the table's size, where a keyspace ``SCAN`` would cost the whole database's.
        """
        layout, pos = self._layout, encode_pos(change.pos)
        current = client.get(layout.truncated(change.table))
        if current is not None and as_str(current) >= pos:
            return  # a replay of a truncate already done: the rows after it must stay
        rows, positions = layout.rows(change.table), layout.positions(change.table)
        for fields in scan_fields(client, positions):
            client.evalsha(self._sha, 0, "trunc", rows, positions, pos, *fields)
        client.evalsha(self._sha, 0, "floor", layout.truncated(change.table), pos)
