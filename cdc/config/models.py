"""The pipeline file's section models every part shares: the source's and a sink's common
fields (each plugin's model extends them), the log's and the metrics' sections."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
)

from cdc.config.batch_bytes import BATCH_BYTES, BatchBytes
from cdc.transforms import filters
from cdc.transforms.filters import TableEntry
from cdc.transforms.masks import MIN_KEY_LENGTH

NAME_PATTERN = r"^[a-z][a-z0-9_]*$"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceConfig(StrictModel):
    """Fields every source shares; a plugin's model extends it.

    ``tables`` holds each captured table as a :class:`~cdc.transforms.filters.TableEntry` (a plain
    name in the file becomes one with no filters); :attr:`table_names` lists their names, in order.
    ``mask_key`` keys the hash masks (a secret: never logged, never stored).
    """

    type: str
    tables: list[TableEntry] = Field(min_length=1)
    snapshot: Literal["initial", "never", "always", "when_needed"] = "initial"
    mask_key: SecretStr | None = Field(default=None, validate_default=True)

    @field_validator("tables", mode="before")
    @classmethod
    def _entries(cls, tables: Any) -> Any:
        if not isinstance(tables, list):
            return tables
        for table in tables:
            if isinstance(table, str):
                TableEntry.check_name(table)  # reported under source.tables, as it is written
        return [filters.entry(t) for t in tables]

    @field_validator("tables")
    @classmethod
    def _distinct(cls, tables: list[TableEntry]) -> list[TableEntry]:
        names = [t.name for t in tables]
        if len(set(names)) != len(names):
            raise ValueError("tables are listed more than once")
        return tables

    @field_validator("mask_key")
    @classmethod
    def _key_for_hashes(cls, key: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        hashed = [
            f"{t.name}.{column}"
            for t in info.data.get("tables") or []
            for column, spec in t.mask.items()
            if spec.type == "hash"
        ]
        if key is None and hashed:
            raise ValueError(
                f"is required by the hash masks of {', '.join(hashed)} (a secret: give it as "
                "${CDC_MASK_KEY}, e.g. from `openssl rand -hex 32`)"
            )
        if key is not None and len(key.get_secret_value()) < MIN_KEY_LENGTH:
            raise ValueError(
                f"must be at least {MIN_KEY_LENGTH} characters: a short key can be guessed"
            )
        return key

    @property
    def table_names(self) -> list[str]:
        """``schema.table`` (or ``db.collection``) of every captured table, in order."""
        return [t.name for t in self.tables]

    def table_entry(self, name: str) -> TableEntry:
        """The entry of table ``name`` (a plain one if it is not captured)."""
        return next((t for t in self.tables if t.name == name), TableEntry(name=name))

    def mask_key_bytes(self) -> bytes | None:
        """The hash masks' key, as HMAC takes it."""
        return None if self.mask_key is None else self.mask_key.get_secret_value().encode()


#: Records a sink task reads and applies at a time. Every sink of a pipeline holds one batch, in
#: several forms (stored bytes, decoded rows, the store's own), at once: 5,000 put a pipeline with
#: DuckDB, Redis and search sinks at 330 MB RSS during a 1M-row transaction, 2,000 at 289 MB, in
#: the same catch-up time (bench/memory.py, 2026-12-06).
BATCH_RECORDS = 2000


class SinkConfig(StrictModel):
    """Fields every sink shares; a plugin's model extends it.

    ``batch_records`` bounds the records the sink applies (and flushes) at a time: larger
    batches spread a flush's fixed cost over more records, smaller ones hold less memory.
    ``batch_bytes`` bounds their bytes too, about: fewer records a batch when they are large
    (:mod:`cdc.runtime.read_size`).
    """

    name: str = Field(pattern=NAME_PATTERN)
    type: str
    tables: list[str] | None = None  # None: every table of the source
    batch_records: int = Field(default=BATCH_RECORDS, ge=1, le=100_000)
    batch_bytes: BatchBytes = BATCH_BYTES


class EmbeddedLogConfig(StrictModel):
    type: Literal["embedded"] = "embedded"
    path: str | None = None  # None: .cdc/<pipeline name>
    partitions: int = Field(default=1, ge=1, le=256)
    durability: Literal["full", "normal"] = "full"
    tombstone_retention_ms: int = Field(default=24 * 3600 * 1000, ge=0)


class KafkaLogConfig(StrictModel):
    """Apache Kafka as the log (see :mod:`cdc.log.kafka`).

    ``properties`` go to every librdkafka client (security settings, timeouts);
    ``topic_properties`` to every topic the log creates, after the settings below.
    """

    type: Literal["kafka"]
    bootstrap_servers: str
    partitions: int = Field(default=3, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    properties: dict[str, str] = Field(default_factory=dict)
    topic_properties: dict[str, str] = Field(default_factory=dict)
    # A record stays uncompacted this long, so consumers that lag less see every version.
    min_compaction_lag_ms: int = Field(default=60_000, ge=0)
    # How long a tombstone survives compaction: sinks lagging less than this still see deletes.
    delete_retention_ms: int = Field(default=24 * 3600 * 1000, ge=0)
    segment_ms: int | None = Field(default=None, ge=1)  # None: the broker's default (7 days)
    transaction_timeout_ms: int = Field(default=60_000, ge=1000)
    session_timeout_ms: int = Field(default=10_000, ge=1000)
    connect_timeout_s: float = Field(default=15.0, gt=0, le=30)
    # The source's local state (its latest-image store, for TOAST fills): None is .cdc/<name>.
    state_path: str | None = None


class MetricsConfig(StrictModel):
    """The HTTP endpoint of ``cdc run`` and ``cdc sink`` (:mod:`cdc.metrics`)."""

    listen: str | None = None  # host:port of /metrics, /healthz, /readyz; None: off
    # A task that makes no progress while work waits for it this long is stalled.
    stall_after_s: float = Field(default=300.0, gt=0)

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str | None) -> str | None:
        if listen is not None:
            parse_listen(listen)
        return listen


class VerifyConfig(StrictModel):
    """Continuous verification inside ``cdc run`` (:mod:`cdc.runtime.verifier`): every
    ``interval_s``, one range of the key hash space, sized to hold about ``sample_keys`` keys of
    the largest table, is compared between the source and every sink that can be read back;
    the ranges rotate, so each full pass covers every key."""

    interval_s: float = Field(default=300.0, gt=0)
    sample_keys: int = Field(default=10_000, ge=1)


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9464`` for IPv6) as ``(host, port)``.

    Raises:
        ValueError: not ``host:port`` with a port in 0-65535.
    """
    host, sep, port = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"must be host:port, e.g. 127.0.0.1:9464 (got {listen!r})")
    return host, int(port)
