"""The ``iceberg`` sink's section of a pipeline file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from cdc.config.models import SinkConfig
from cdc.support.redact import redact


class IcebergSinkConfig(SinkConfig):
    """``type: iceberg``: the source's tables as Apache Iceberg tables.

    Attributes:
        catalog: the properties handed to pyiceberg's ``load_catalog`` (``{type: sql, uri:
            "sqlite:///lake/catalog.db"}``, ``{type: rest, uri: https://..., token: ...}``).
            Every value is kept as a secret: none reaches a log, an error or ``cdc status``.
        warehouse: where data files go (a path or a URI); given to the catalog as its
            ``warehouse`` unless the catalog mapping names one.
        namespace: the Iceberg namespace of the tables (default: the pipeline's name).
        mode: ``current`` keeps each table's current rows (upserts and deletes by key);
            ``append`` keeps every change as a row of a changelog.
        commit_interval_s: at most this long between a change and its commit.
        max_rows: commit once this many changes are buffered.
    """

    type: Literal["iceberg"] = "iceberg"
    catalog: dict[str, SecretStr]
    warehouse: str | None = None
    namespace: str | None = Field(default=None, min_length=1)
    mode: Literal["current", "append"] = "current"
    commit_interval_s: float = Field(default=10.0, ge=0)
    max_rows: int = Field(default=50_000, ge=1)

    @field_validator("catalog", mode="before")
    @classmethod
    def _as_text(cls, catalog: Any) -> Any:
        """pyiceberg takes string properties; a YAML number or boolean becomes its text."""
        if not isinstance(catalog, dict) or not catalog:
            raise ValueError("a mapping of catalog properties, e.g. {type: sql, uri: ...}")
        return {str(k): v if isinstance(v, str | SecretStr) else str(v) for k, v in catalog.items()}

    def catalog_properties(self) -> dict[str, str]:
        """The properties for ``load_catalog``, secrets revealed (never log them)."""
        properties = {k: v.get_secret_value() for k, v in self.catalog.items()}
        if self.warehouse is not None and "warehouse" not in properties:
            properties["warehouse"] = warehouse_uri(self.warehouse)
        return properties

    def where(self) -> str:
        """The catalog as a log line may name it: its type and its URI without secrets."""
        kind = self.catalog.get("type")
        uri = self.catalog.get("uri")
        shown = kind.get_secret_value() if kind is not None else "catalog"
        if uri is not None:
            shown += " " + redact(uri.get_secret_value())
        return shown

    def namespace_for(self, pipeline: str) -> str:
        return self.namespace or pipeline

    def scrub(self, text: str) -> str:
        """``text`` (a driver's message) without any catalog value that could be a secret: a
        URI by its redacted form, every other value but the type and warehouse masked."""
        for name, value in self.catalog.items():
            secret = value.get_secret_value()
            if name in ("type", "warehouse") or len(secret) < 4:
                continue
            shown = redact(secret) if name == "uri" else "***"
            text = text.replace(secret, shown)
        return redact(text)


def warehouse_uri(warehouse: str) -> str:
    """A bare path as the ``file://`` URI of its absolute form; a URI as it is."""
    if urlsplit(warehouse).scheme:
        return warehouse
    return Path(warehouse).resolve().as_uri()
