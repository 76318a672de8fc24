"""``cdc doctor`` for the Redis sink: the server answers, and takes a write in the sink's db.

The write is a ``SET`` of a probe key under the sink's prefix, with a one-minute expiry in
case the ``DEL`` that follows never arrives.
"""

from __future__ import annotations

import uuid

import redis
from redis import exceptions as rx

from cdc.config.pipeline import secret_value
from cdc.contracts.checks import Check, failed, passed
from cdc.support.redact import redact
from sinks.redis.config import RedisSinkConfig
from sinks.redis.connection import connect, translate

PROBE_TTL_MS = 60_000


def doctor(config: RedisSinkConfig, pipeline_name: str) -> list[Check]:
    """PING, then SET and DEL of a probe key in the configured database."""
    where = redact(secret_value(config.url))
    client = connect(config)
    try:
        try:
            client.ping()
        except rx.RedisError as exc:
            fix = f"start Redis at {where}, or correct the sink's url"
            return [failed("reachable", str(translate(exc, config)), fix)]
        reached = passed("reachable", f"{where} answers PING")
        return [reached, _write(client, config, config.key_prefix or pipeline_name)]
    finally:
        client.close()


def _write(client: redis.Redis, config: RedisSinkConfig, prefix: str) -> Check:
    db = client.connection_pool.connection_kwargs.get("db", 0)
    probe = f"{prefix}:__doctor__:{uuid.uuid4().hex}"
    try:
        client.set(probe, b"1", px=PROBE_TTL_MS)
        client.delete(probe)
    except rx.RedisError as exc:
        fix = (
            "let the user write (ACL SETUSER <user> on ~<prefix>:* +@write +@read +@scripting), "
            "and point url at the primary, not a replica"
        )
        return failed("write", str(translate(exc, config)), fix)
    return passed("write", f"SET and DEL of a probe key in db {db}")
