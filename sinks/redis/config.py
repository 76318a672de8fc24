"""The ``redis`` sink's section of a pipeline file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from redis.connection import parse_url

from cdc.config.models import SinkConfig
from cdc.support.redact import redact


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
