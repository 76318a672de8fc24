"""The ``opensearch`` sink's section of a pipeline file, and the names of its indexes."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from cdc.config.models import SinkConfig

#: OpenSearch refuses these in an index name (and an upper-case letter, which is lowered).
_INVALID = re.compile(r'[\\/*?"<>| ,#:]')
_FIELDS = ("pipeline", "schema", "table")


class OpenSearchSinkConfig(SinkConfig):
    """``type: opensearch``: one index per source table, one document per key.

    Attributes:
        url: the cluster's address, ``http(s)://host:port``; credentials go in ``username`` and
            ``password`` (or ``api_key``), never in the URL.
        index: each table's index name, a template of ``{pipeline}``, ``{schema}`` and
            ``{table}``, lower-cased.
        offsets_index: the index holding the sink's consumed offsets (one document a
            partition, shared by every pipeline and sink of the cluster).
        username, password: HTTP basic authentication (the security plugin's internal users).
        api_key: an ``Authorization: ApiKey`` credential instead of a user.
        verify_certs: check the server's TLS certificate (``https`` URLs).
        ca_certs: a PEM file of the CA that signed the server's certificate.
        timeout_s: one request's timeout.
        shards, replicas: of each index the sink creates (``replicas`` unset: the cluster's
            default).
        gc_deletes: ``index.gc_deletes`` of each index the sink creates: how long a deleted
            key's version is remembered, so an older change arriving later cannot bring it back.
        refresh: the Bulk API's ``refresh`` for data writes: ``false`` (the index's
            ``refresh_interval`` makes them searchable), ``wait_for`` or ``true``.
        bulk_bytes: the largest Bulk API request body; a batch is cut into requests of at most
            this size.
    """

    type: Literal["opensearch"] = "opensearch"
    url: str = "http://localhost:9200"
    index: str = Field(default="{pipeline}.{schema}.{table}", min_length=1)
    offsets_index: str = Field(default="cdc-offsets", min_length=1, max_length=200)
    username: str | None = None
    password: SecretStr | None = None
    api_key: SecretStr | None = None
    verify_certs: bool = True
    ca_certs: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    shards: int = Field(default=1, ge=1, le=1024)
    replicas: int | None = Field(default=None, ge=0)
    gc_deletes: str = Field(default="24h", pattern=r"^\d+(ms|s|m|h|d)$")
    refresh: Literal["false", "true", "wait_for"] = "false"
    bulk_bytes: int = Field(default=8 << 20, ge=1 << 16, le=100 << 20)

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be http(s)://host[:port]")
        if parts.username or parts.password:  # the message must not quote them
            raise ValueError("put credentials in username/password or api_key, not in the url")
        return url.rstrip("/")

    @field_validator("index")
    @classmethod
    def _template(cls, template: str) -> str:
        try:
            sample = template.format(pipeline="p", schema="s", table="t")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"index may name only {{pipeline}}, {{schema}}, {{table}}: {exc}"
            ) from None
        check_index_name(sample)
        return template

    @field_validator("offsets_index")
    @classmethod
    def _offsets(cls, name: str) -> str:
        return check_index_name(name)

    @model_validator(mode="after")
    def _auth(self) -> OpenSearchSinkConfig:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.api_key is not None and self.username is not None:
            raise ValueError("give either username/password or api_key, not both")
        return self

    def index_name(self, pipeline: str, table: tuple[str, str]) -> str:
        """The index of source ``table`` (checked: see :func:`check_index_name`).

        Raises:
            ValueError: the name the template makes is not one OpenSearch accepts.
        """
        name = self.index.format(pipeline=pipeline, schema=table[0], table=table[1])
        return check_index_name(name.lower())


def check_index_name(name: str) -> str:
    """``name``, lower-cased, when OpenSearch accepts it as an index name.

    Raises:
        ValueError: it does not (OpenSearch's own rules, and no leading dot: a dotted name is
            reserved for hidden and system indexes).
    """
    lowered = name.lower()
    if (
        not lowered
        or _INVALID.search(lowered)
        or lowered[0] in "._-+"
        or len(lowered.encode()) > 255
    ):
        raise ValueError(
            f"{name!r} is not a valid index name (lower case, at most 255 bytes, none of "
            '\\ / * ? " < > | , # : or a space, not starting with . _ - +)'
        )
    return lowered
