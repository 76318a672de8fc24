"""The Redis cache sink: one string per row, written under a version guard, exactly once.

``write`` only classifies the batch (so a bad record is reported before anything is sent);
``flush`` sends it in one pipelined round trip of ``EVALSHA`` calls (a truncate adds a few: it
scans the table). The guard lives in the script (:mod:`sinks.redis.script`), so a replayed or
late older change is skipped inside Redis, atomically with the write it guards. The last call of
a batch also stores the consumed offsets, so a batch is either fully applied with its offsets or
replayed harmlessly. The script is loaded once and reloaded when Redis answers ``NOSCRIPT``
(after a restart).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeVar

import orjson
import redis
from pydantic import Field, SecretStr, field_validator
from redis import exceptions as rx
from redis.connection import parse_url

from cdc.config import SinkConfig, secret_value
from cdc.errors import CdcError, SinkFatal, SinkUnavailable
from cdc.log.base import TopicPartition
from cdc.redact import redact
from cdc.sink import SinkContext, SinkRecord
from sinks.keyed import Change, Kind, Table, TopicTables, classify
from sinks.redis.script import LUA, ApplyCall, Layout, encode_pos, offsets_args

T = TypeVar("T")
CHUNK = 500  # changes per script call: long scripts block every other Redis client
SCAN_COUNT = 1000
# Partitions assumed when Redis holds no offsets: start every one from 0 (a full rebuild).
ASSUMED_PARTITIONS = 1024


class RedisSinkConfig(SinkConfig):
    """``type: redis``.

    Attributes:
        url: ``redis://[:password@]host:port/db`` (``rediss://`` for TLS); never logged.
        ttl_s: expire row keys this long after their last write; ``None`` keeps them.
        key_prefix: first part of every key; defaults to the pipeline name.
        timeout_s: socket connect and read timeout.
    """

    type: Literal["redis"] = "redis"
    url: SecretStr
    ttl_s: int | None = Field(default=None, ge=1)
    key_prefix: str | None = Field(default=None, min_length=1)
    timeout_s: float = Field(default=5.0, gt=0)

    @field_validator("url")
    @classmethod
    def _parses(cls, url: SecretStr) -> SecretStr:
        try:
            parse_url(url.get_secret_value())  # type: ignore[no-untyped-call]
        except ValueError as exc:  # redis-py's messages can quote a piece of the URL
            raise ValueError(redact(str(exc), url.get_secret_value())) from None
        return url


def connect(config: RedisSinkConfig) -> redis.Redis:
    """A client for ``config.url`` (no I/O yet)."""
    url = secret_value(config.url)
    try:
        return redis.Redis.from_url(
            url, socket_timeout=config.timeout_s, socket_connect_timeout=config.timeout_s
        )
    except ValueError as exc:
        raise SinkFatal(f"redis url {redact(url)} is invalid: {redact(str(exc), url)}") from None


def translate(exc: rx.RedisError, config: RedisSinkConfig) -> CdcError:
    """A driver error as the runtime's error: retriable while Redis is down or saturated.

    The message names the server by its redacted URL; the driver's text is redacted against
    the URL too, in case it quotes a piece of it.
    """
    url = secret_value(config.url)
    where = redact(url)
    text = redact(str(exc), url)
    if isinstance(exc, rx.AuthenticationError | rx.AuthorizationError):
        return SinkFatal(f"redis at {where} refused the credentials: {text}")
    if isinstance(exc, rx.ConnectionError | rx.TimeoutError | rx.ReadOnlyError):
        return SinkUnavailable(f"redis at {where} is unreachable: {text}")
    if isinstance(exc, rx.OutOfMemoryError) or text.startswith(("MISCONF", "BUSY")):
        return SinkUnavailable(f"redis at {where} refuses writes for now: {text}")
    if "CDCLOST" in text:
        return SinkFatal(
            f"redis at {where} lost this sink's data (restarted without persistence, or "
            "flushed); restart the pipeline: the sink rebuilds its tables from the log"
        )
    return SinkFatal(f"redis at {where} failed: {text}")


class RedisSink:
    """Keeps ``<prefix>:<schema>.<table>:<key>`` strings equal to the source rows."""

    def __init__(self, config: RedisSinkConfig, context: SinkContext) -> None:
        self._config = config
        self._layout = Layout(config.key_prefix or context.pipeline)
        # config.name (the context's sink name too): read_rows finds the offsets by it.
        self._sink_keys = (self._layout.offsets(config.name), self._layout.rebuild(config.name))
        self._tables = TopicTables(context.pipeline, context.tables)
        self._topics = list(self._tables_topics(context))
        self._ttl_ms = (config.ttl_s or 0) * 1000
        self._client: redis.Redis | None = None
        self._sha = ""
        self._stored: dict[TopicPartition, int] = {}
        self._expect_offsets = False
        self._rebuild = False
        self._pending: list[Change] = []
        self._pending_records: list[SinkRecord] = []

    @staticmethod
    def _tables_topics(context: SinkContext) -> Iterator[str]:
        for schema, table in context.tables:
            yield f"{context.pipeline}.{schema}.{table}"

    def open(self) -> None:
        self._client = connect(self._config)
        self._call(self._load)
        offsets_key, rebuild_key = self._sink_keys
        stored = self._call(lambda c: c.hgetall(offsets_key))
        self._rebuild = bool(self._call(lambda c: c.exists(rebuild_key)))
        self._expect_offsets = bool(stored)
        self._stored = {}
        for field, offset in stored.items():
            topic, _, partition = _text(field).rpartition("|")
            self._stored[TopicPartition(topic, int(partition))] = int(offset)

    def stored_offsets(self) -> Mapping[TopicPartition, int]:
        """The offsets stored with the data; every partition from 0 when Redis lost the data."""
        if self._rebuild:
            return {
                TopicPartition(t, p): 0 for t in self._topics for p in range(ASSUMED_PARTITIONS)
            }
        return dict(self._stored)

    def write(self, records: Sequence[SinkRecord]) -> None:
        # Classify everything first: a bad record raises before anything is sent.
        changes = [classify(record, self._tables) for record in records]
        self._pending += changes
        self._pending_records += records

    def flush(self) -> None:
        try:
            if self._pending_records:
                self._call(self._apply_pending)
                self._expect_offsets, self._rebuild = True, False
        finally:
            self._pending = []
            self._pending_records = []

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
        self._call(lambda client: self._forget(client, table))
        fields = [f"{tp.topic}|{tp.partition}" for tp in partitions]
        if fields:
            offsets_key = self._sink_keys[0]
            self._call(lambda c: c.hset(offsets_key, mapping=dict.fromkeys(fields, 0)))
            self._expect_offsets = True
        for tp in partitions:
            self._stored[tp] = 0

    def _forget(self, client: redis.Redis, table: Table) -> None:
        rows, positions = self._layout.rows(table), self._layout.positions(table)
        # HSCAN returns every field present from start to end of a scan, deletions meanwhile
        # notwithstanding; Redis drops the hash with its last field.
        while client.exists(positions):
            for page in _scan_fields(client, positions):
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
        segment: list[Change] = []
        for change in self._pending:
            if change.kind is Kind.TRUNCATE:
                self._send(client, segment, last=False)
                self._truncate(client, change)
                segment = []
            else:
                segment.append(change)
        self._send(client, segment, last=True)

    def _send(self, client: redis.Redis, changes: list[Change], last: bool) -> None:
        """One round trip: the changes in chunks, the offsets with the last chunk of a batch.

        Each chunk is sent as soon as it is built and the replies are read at the end, so
        Redis runs one chunk's script while the next chunk is being encoded here.
        """
        if not last and not changes:
            return
        chunks = range(0, max(1, len(changes)), CHUNK)
        conn = client.connection_pool.get_connection()
        try:
            for start in chunks:
                offsets = (
                    offsets_args(self._pending_records) if last and start == chunks[-1] else []
                )
                call = ApplyCall(self._layout, changes[start : start + CHUNK])
                args = call.args(self._ttl_ms, self._sink_keys, self._expect_offsets, offsets)
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

    def _truncate(self, client: redis.Redis, change: Change) -> None:
        """Delete the table's rows older than the truncate, then raise the table's floor.

        The position hash lists every key the sink wrote for the table, so scanning it costs
        the table's size, where a keyspace ``SCAN`` would cost the whole database's.
        """
        layout, pos = self._layout, encode_pos(change.pos)
        current = client.get(layout.truncated(change.table))
        if current is not None and _text(current) >= pos:
            return  # a replay of a truncate already done: the rows after it must stay
        rows, positions = layout.rows(change.table), layout.positions(change.table)
        for fields in _scan_fields(client, positions):
            client.evalsha(self._sha, 0, "trunc", rows, positions, pos, *fields)
        client.evalsha(self._sha, 0, "floor", layout.truncated(change.table), pos)


def read_rows(
    config: RedisSinkConfig,
    schema: str,
    table: str,
    *,
    pipeline: str | None = None,
    key_columns: Sequence[str] | None = None,
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Every row the sink holds for ``schema.table`` as ``(key, row)``, for ``cdc verify``.

    Args:
        config: the sink's config.
        schema: schema of the table.
        table: table name.
        pipeline: the pipeline name, the key prefix when ``config.key_prefix`` is unset; when
            neither is given, the prefix is found from the sink's offsets hash.
        key_columns: build each key from these columns of the row; when ``None`` the key is
            ``{"key": "<key values joined by ':'>"}``, as in the Redis key.

    Raises:
        SinkFatal: the prefix is not given and several prefixes hold this sink's offsets.
        SinkUnavailable: Redis cannot be reached.
    """
    client = connect(config)
    try:
        prefix = config.key_prefix or pipeline or _find_prefix(client, config.name)
        if prefix is None:
            return  # the sink never stored a batch: it holds no rows
        layout = Layout(prefix)
        rows, positions = layout.rows((schema, table)), layout.positions((schema, table))
        for suffixes in _scan_fields(client, positions):
            for suffix, value in zip(
                suffixes, client.mget([rows + s for s in suffixes]), strict=True
            ):
                if value is not None:  # a deleted row's position marker
                    row: dict[str, Any] = orjson.loads(value)
                    key = (
                        {"key": suffix}
                        if key_columns is None
                        else {c: row.get(c) for c in key_columns}
                    )
                    yield key, row
    except rx.RedisError as exc:
        raise translate(exc, config) from exc
    finally:
        client.close()


def _find_prefix(client: redis.Redis, sink_name: str) -> str | None:
    """The key prefix whose offsets hash belongs to ``sink_name`` (a keyspace ``SCAN``)."""
    marker = Layout("").offsets(sink_name)  # ":__offsets:<sink name>"
    found = {
        _text(key).removesuffix(marker)
        for key in client.scan_iter(match="*" + _glob_escape(marker), count=SCAN_COUNT)
    }
    if len(found) > 1:
        raise SinkFatal(
            f"redis: sink {sink_name!r} has offsets under several key prefixes "
            f"({', '.join(sorted(found))}); set key_prefix"
        )
    return found.pop() if found else None


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _scan_fields(client: redis.Redis, key: str) -> Iterator[list[str]]:
    """The fields of hash ``key``, a page at a time."""
    cursor = 0
    while True:
        cursor, found = client.hscan(key, cursor, count=SCAN_COUNT)
        if found:
            yield [_text(field) for field in found]
        if cursor == 0:
            return


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisSinkPlugin:
    """Entry point ``redis`` of ``cdc.sinks``."""

    config_model = RedisSinkConfig

    @staticmethod
    def create(config: RedisSinkConfig, context: SinkContext) -> RedisSink:
        return RedisSink(config, context)

    read_rows = staticmethod(read_rows)
