"""The ``opensearch-py`` client of a sink's configuration, and its errors as the framework's."""

from __future__ import annotations

from typing import Any

import orjson
from opensearchpy import OpenSearch
from opensearchpy import exceptions as os_errors
from opensearchpy.serializer import JSONSerializer

from cdc.contracts.errors import CdcError, SinkFatal, SinkUnavailable
from cdc.support.redact import redact
from sinks.opensearch.config import OpenSearchSinkConfig


class FastJSON(JSONSerializer):
    """The client's JSON with orjson: a bulk reply holds an item per document, and the standard
    library's parser was the sink's largest CPU cost after the network."""

    def loads(self, s: str | bytes) -> Any:
        return orjson.loads(s)


def connect(config: OpenSearchSinkConfig) -> OpenSearch:
    """A client of the configured cluster (nothing is sent until the first request)."""
    options: dict[str, Any] = {
        "hosts": [config.url],
        "timeout": config.timeout_s,
        "verify_certs": config.verify_certs,
        "ssl_show_warn": config.verify_certs,
        "max_retries": 0,  # the runtime's sink task retries, with its backoff and metrics
        "serializer": FastJSON(),
    }
    if config.ca_certs:
        options["ca_certs"] = config.ca_certs
    if config.username is not None and config.password is not None:
        options["http_auth"] = (config.username, config.password.get_secret_value())
    if config.api_key is not None:
        options["headers"] = {"Authorization": f"ApiKey {config.api_key.get_secret_value()}"}
    return OpenSearch(**options)


def _secrets(config: OpenSearchSinkConfig) -> list[str]:
    return [s.get_secret_value() for s in (config.password, config.api_key) if s is not None]


def safe(text: str, config: OpenSearchSinkConfig) -> str:
    """``text`` with the sink's secrets masked (an error may quote a request)."""
    text = redact(text)
    for secret in _secrets(config):
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def reason(exc: os_errors.TransportError) -> str:
    """The server's own reason of a refused request, or the status."""
    info = exc.info if isinstance(exc.info, dict) else {}
    error = info.get("error")
    if isinstance(error, dict):
        return f"{error.get('type')}: {error.get('reason')}"
    return f"{exc.status_code} {exc.error}"


def translate(exc: Exception, config: OpenSearchSinkConfig, doing: str) -> CdcError:
    """``exc`` of the client as a retriable or fatal sink error naming the cluster."""
    where = f"OpenSearch at {config.url}"
    if isinstance(exc, CdcError):
        return exc
    if isinstance(exc, os_errors.ConnectionError):  # refused, timed out, TLS
        return SinkUnavailable(f"{where} {doing}: {safe(str(exc.info or exc), config)}")
    if isinstance(exc, os_errors.AuthenticationException | os_errors.AuthorizationException):
        return SinkFatal(
            f"{where} {doing}: refused the sink's credentials or permissions "
            f"({safe(reason(exc), config)}); check username/password or api_key and the "
            "user's index permissions"
        )
    if isinstance(exc, os_errors.TransportError):
        status = exc.status_code if isinstance(exc.status_code, int) else 0
        text = f"{where} {doing}: {safe(reason(exc), config)}"
        if status == 429 or status >= 500 or status == 0:
            return SinkUnavailable(text)
        return SinkFatal(text)
    return SinkUnavailable(f"{where} {doing}: {safe(repr(exc), config)}")
