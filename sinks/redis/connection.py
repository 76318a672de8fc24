"""The Redis client of the sink and its reader: connecting, scanning, and the driver's errors."""

from __future__ import annotations

from collections.abc import Iterator

import redis
from redis import exceptions as rx

from cdc.config.pipeline import secret_value
from cdc.contracts.errors import CdcError, SinkDataLost, SinkFatal, SinkUnavailable
from cdc.support.redact import redact
from sinks.redis.config import RedisSinkConfig

SCAN_COUNT = 1000


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
        return SinkDataLost(
            f"redis at {where} lost this sink's data (restarted without persistence, flushed, "
            "or failed over to an empty replica): the sink rebuilds its tables from the log"
        )
    return SinkFatal(f"redis at {where} failed: {text}")


def scan_fields(client: redis.Redis, key: str) -> Iterator[list[str]]:
    """The fields of hash ``key``, a page at a time."""
    cursor = 0
    while True:
        cursor, found = client.hscan(key, cursor, count=SCAN_COUNT)
        if found:
            yield [as_str(field) for field in found]
        if cursor == 0:
            return


def as_str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
