"""The ``source`` section of a pipeline file when ``type: postgres``."""

from __future__ import annotations

from typing import Any, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pydantic import Field, SecretStr, field_validator, model_validator

from cdc.config.batch_bytes import BATCH_BYTES, BatchBytes
from cdc.config.models import SourceConfig
from cdc.support.redact import redact
from cdc.transforms.filters import TableEntry

#: Slot names allow only these characters (PostgreSQL's rule), which also makes them safe to
#: place inside a replication command.
SLOT_PATTERN = r"^[a-z0-9_]{1,63}$"
PUBLICATION_PATTERN = r"^[a-z_][a-z0-9_]{0,62}$"
SIGNAL_TABLE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$"


class PostgresSourceConfig(SourceConfig):
    """Settings of the PostgreSQL source.

    Attributes:
        dsn: libpq connection string or URL; a secret, never logged (see :mod:`cdc.support.redact`).
        key_columns: per ``schema.table``, the columns that form the record key of a table
            without a primary key.
        publication: publication name; ``<pipeline>_pub`` when omitted.
        slot: replication slot name; ``<pipeline>_slot`` when omitted.
        stream_in_progress: ask the server (PostgreSQL 14+) to stream large transactions
            before they commit (``streaming = on``, or ``parallel`` from PostgreSQL 16); they
            are spooled to disk until commit.
        skip_replicated: leave out the changes a logical replication subscriber applied to
            this database (pgoutput's ``origin = none``, PostgreSQL 16+), so a bidirectional
            setup does not capture its own changes back; local writes are still captured.
        heartbeat_interval_s: emit a ``pg_logical_emit_message`` this often so the slot's
            position moves even when this database is idle; off when omitted.
        status_interval_s: how often a standby status update reports the flush position.
        idle_commit_interval_s: while no captured table changes, how often the WAL the server
            passed is stored as the position (one log commit each, only when WAL moved): what
            a read-your-writes fence (``cdc wait``) on such WAL waits for.
        max_batch_events: most events one poll returns inside a large transaction.
        max_batch_bytes: about the most bytes of changes one poll returns (bytes or a size
            such as ``16MiB``): a poll stops adding events once its changes' messages and the
            TOASTed values it filled in reach it, always after at least one event, at the same
            points ``max_batch_events`` splits a large transaction at
            (:mod:`cdc.config.batch_bytes`).
        connect_timeout_s: how long a connection attempt may take, and how long the first
            start (no stored position yet) waits for an unreachable server before it stops
            with the error; once the pipeline has run, a lost server is retried with backoff.
        snapshot_workers: connections reading snapshot chunks in parallel.
        snapshot_chunk_rows: rows per snapshot chunk (the unit of progress and of a retry).
        snapshot_key_columns: per ``schema.table``, unique NOT NULL columns to chunk the
            snapshot by when the table has no primary key (else ``ctid`` page ranges are used).
        snapshot_signal_table: ``schema.table`` of a table that carries snapshot watermarks
            and ``cdc snapshot`` requests instead of logical messages; by default one
            (``<schema>.<pipeline>_cdc_signal``) is used only when the role may not run
            ``pg_logical_emit_message``.
        slot_failover: create the slot as a failover slot (PostgreSQL 17+), which standbys
            with ``sync_replication_slots = on`` copy, so the pipeline resumes on a promoted
            standby; an existing slot without it is altered at start. The primary should name
            the standbys' physical slots in ``synchronized_standby_slots`` (``cdc doctor`` says
            what is missing).
    """

    type: Literal["postgres"] = "postgres"
    dsn: SecretStr
    key_columns: dict[str, list[str]] = Field(default_factory=dict)
    publication: str | None = Field(default=None, pattern=PUBLICATION_PATTERN)
    slot: str | None = Field(default=None, pattern=SLOT_PATTERN)
    stream_in_progress: bool = False
    skip_replicated: bool = False
    heartbeat_interval_s: float | None = Field(default=None, gt=0)
    status_interval_s: float = Field(default=10.0, gt=0)
    idle_commit_interval_s: float = Field(default=0.2, gt=0)
    # 2,000 rather than 5,000: a batch's events, records and rows then stay in the CPU caches,
    # which made bench/pg_stream.py's insert ~5% faster here (3 runs each, 2-core EPYC).
    max_batch_events: int = Field(default=2000, ge=1)
    max_batch_bytes: BatchBytes = BATCH_BYTES
    connect_timeout_s: float = Field(default=30.0, gt=0)
    snapshot_workers: int = Field(default=2, ge=1, le=64)
    snapshot_chunk_rows: int = Field(default=50_000, ge=1)
    snapshot_key_columns: dict[str, list[str]] = Field(default_factory=dict)
    snapshot_signal_table: str | None = Field(default=None, pattern=SIGNAL_TABLE_PATTERN)
    slot_failover: bool = False

    @field_validator("dsn")
    @classmethod
    def _parses(cls, dsn: SecretStr) -> SecretStr:
        # libpq's parse errors quote raw pieces of the string, so its message is redacted
        # against this DSN before it becomes a config error.
        parse_dsn(dsn.get_secret_value())
        return dsn

    @field_validator("key_columns")
    @classmethod
    def _non_empty(cls, key_columns: dict[str, list[str]]) -> dict[str, list[str]]:
        for table, columns in key_columns.items():
            if not columns:
                raise ValueError(f"key_columns of {table!r} is empty")
        return key_columns

    @field_validator("tables")
    @classmethod
    def _sql_filters(cls, tables: list[TableEntry]) -> list[TableEntry]:
        for entry in tables:
            if entry.where is not None and not isinstance(entry.where, str):
                raise ValueError(
                    f"where of {entry.name} must be an SQL expression over its columns "
                    '(a text, such as "tenant_id = 42"), the publication\'s row filter'
                )
        return tables

    @model_validator(mode="after")
    def _no_raw_spool(self) -> PostgresSourceConfig:
        hidden = [t.name for t in self.tables if t.mask or t.columns]
        if self.stream_in_progress and hidden:
            raise ValueError(
                "stream_in_progress spools a large transaction's changes to a temporary file as "
                "the server sends them, before the source leaves out or masks columns; with the "
                f"columns or masks of {', '.join(hidden)}, turn it off (such a transaction is "
                "then streamed at its commit, in bounded batches)"
            )
        return self

    @model_validator(mode="after")
    def _key_columns_kept(self) -> PostgresSourceConfig:
        for entry in self.tables:
            dropped = [c for c in self.key_columns.get(entry.name, ()) if not entry.keeps(c)]
            if dropped:
                raise ValueError(
                    f"key_columns of {entry.name} names {dropped}, which its columns leave "
                    "out: the record key is made of them"
                )
        return self

    @model_validator(mode="after")
    def _key_tables_captured(self) -> PostgresSourceConfig:
        unknown = sorted(set(self.key_columns) - set(self.table_names))
        if unknown:
            raise ValueError(f"key_columns names tables that are not captured: {unknown}")
        unknown = sorted(set(self.snapshot_key_columns) - set(self.table_names))
        if unknown:
            raise ValueError(f"snapshot_key_columns names tables that are not captured: {unknown}")
        return self

    def slot_name(self, pipeline: str) -> str:
        """The replication slot of ``pipeline``."""
        return self.slot or f"{pipeline}_slot"

    def publication_name(self, pipeline: str) -> str:
        """The publication of ``pipeline``."""
        return self.publication or f"{pipeline}_pub"

    def table_pairs(self) -> list[tuple[str, str]]:
        """``(schema, table)`` of every configured table, in configuration order."""
        return [(t.partition(".")[0], t.partition(".")[2]) for t in self.table_names]


def parse_dsn(dsn: str) -> dict[str, Any]:
    """Parse ``dsn`` as libpq does (no connection, no service file read).

    Returns:
        Its parameters, as :func:`psycopg.conninfo.conninfo_to_dict` gives them.

    Raises:
        ValueError: it is neither a keyword/value string nor a URI libpq accepts; the message
            holds none of its secrets.
    """
    try:
        return conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ValueError(f"not a valid libpq connection string: {redact(str(exc), dsn)}") from None
