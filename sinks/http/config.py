"""The ``http`` sink's section of a pipeline file."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from cdc.config.models import SinkConfig, StrictModel
from sinks.http.signing import RESERVED_HEADERS, signing_key


class RetryConfig(StrictModel):
    """How a failed delivery (5xx, 408, 429, a timeout, a lost connection) is tried again.

    Attributes:
        initial_backoff_s: the first wait's cap; each failure doubles it, up to
            ``max_backoff_s``. The wait is drawn at random below the cap (full jitter), so
            many workers that failed together do not come back together.
        max_backoff_s: the longest wait between two attempts (a ``Retry-After`` aside).
        max_attempts: attempts in a row before the sink stops (this sink alone, nothing
            committed past the last delivered batch); ``None``: retry for ever.
        max_retry_after_s: the longest ``Retry-After`` honoured; a longer one waits this long.
    """

    initial_backoff_s: float = Field(default=0.5, gt=0, le=60)
    max_backoff_s: float = Field(default=30.0, gt=0, le=3600)
    max_attempts: int | None = Field(default=None, ge=1)
    max_retry_after_s: float = Field(default=600.0, gt=0, le=86_400)


class HttpSinkConfig(SinkConfig):
    """``type: http``: every change POSTed, in signed JSON batches, to a webhook receiver.

    Attributes:
        url: the receiver's ``http(s)://`` URL; a secret (its userinfo, a token in its path or
            its query string would be), shown only as ``scheme://host[:port]/…``.
        headers: extra request headers (``Authorization``...); their values are secrets, never
            logged.
        batch_size: records per request, at most.
        timeout_s: one request's timeout (connect, read, write, pool), under the 8 s a stopping
            pipeline gives its tasks.
        secret: the HMAC-SHA256 key of the Standard Webhooks signature: ``whsec_<base64>``
            (the key is the decoded bytes, as the standard's libraries read it) or any other
            text of 16 characters or more (its UTF-8 bytes).
        format: ``debezium``: each record's key and Debezium value; ``rows``: ``{op, table,
            key, row, id, position}``.
        retry: see :class:`RetryConfig`.
    """

    type: Literal["http"] = "http"
    url: SecretStr
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    batch_size: int = Field(default=500, ge=1, le=100_000)
    timeout_s: float = Field(default=5.0, gt=0, le=7.5)
    secret: SecretStr
    format: Literal["debezium", "rows"] = "debezium"
    retry: RetryConfig = Field(default_factory=RetryConfig)

    @field_validator("url")
    @classmethod
    def _url(cls, url: SecretStr) -> SecretStr:
        parts = urlsplit(url.get_secret_value())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            # The message never quotes the URL: it may carry a token.
            raise ValueError("must be an http:// or https:// URL with a host")
        return url

    @field_validator("secret")
    @classmethod
    def _secret(cls, secret: SecretStr) -> SecretStr:
        signing_key(secret.get_secret_value())  # raises ValueError, never quoting it
        return secret

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, SecretStr]) -> dict[str, SecretStr]:
        taken = sorted(n for n in headers if n.lower() in RESERVED_HEADERS)
        if taken:
            raise ValueError(f"{', '.join(taken)}: set by the sink itself (the signature)")
        return headers

    @property
    def shown_url(self) -> str:
        """``scheme://host[:port]``, and ``/…`` for the rest, for logs, errors and ``cdc
        doctor``: a webhook URL's path often is its token (Slack's and Discord's
        ``/webhooks/<id>/<token>``), which no pattern of secrets recognises."""
        return shown(self.url.get_secret_value())


def shown(url: str) -> str:
    """``url`` as :attr:`HttpSinkConfig.shown_url` shows it (userinfo, path, query and
    fragment left out)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:  # an IPv6 address, bracketed again
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:  # not a number: left out rather than quoted
        port = ""
    rest = "/…" if parts.path.strip("/") or parts.query or parts.fragment else ""
    return f"{parts.scheme}://{host}{port}{rest}"
