"""The ``postgres`` entry point of ``cdc.sources``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from cdc.contracts.checks import Check
from cdc.contracts.source import Source, SourceContext
from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.fence import read_once
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.doctor.server import doctor
from connectors.postgres.fence import CurrentPosition, parse_position
from connectors.postgres.lifecycle import drop_replication_objects
from connectors.postgres.lsn import Lsn
from connectors.postgres.replication.probe import SlotProbe
from connectors.postgres.snapshot import key_row
from connectors.postgres.snapshot.signal import cancel_snapshot, request_repair, request_snapshot
from connectors.postgres.snapshot.source import SnapshottingPostgresSource
from connectors.postgres.snapshot.table_rows import keyed_by_value, table_rows


class PostgresSourcePlugin:
    """Builds the PostgreSQL source from its validated config."""

    config_model = PostgresSourceConfig

    @staticmethod
    def create(config: PostgresSourceConfig, context: SourceContext) -> Source:
        """A source for ``config``; nothing connects before ``open``.

        It is the streaming :class:`PostgresSource` wrapped by the snapshot layer, which takes
        the initial snapshot and any requested re-snapshot (:mod:`.snapshot.source`).
        """
        return SnapshottingPostgresSource(config, context)

    @staticmethod
    def request_snapshot(
        config: PostgresSourceConfig, pipeline_name: str, table: str, where: str | None
    ) -> dict[str, Any]:
        """Ask the pipeline to re-snapshot ``table`` while it streams (``cdc snapshot``)."""
        return request_snapshot(config, pipeline_name, table, where)

    @staticmethod
    def request_repair(
        config: PostgresSourceConfig, pipeline_name: str, table: str, keys: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Ask the pipeline to re-read ``keys`` of ``table``, deleting those the table lacks
        (``cdc verify --repair``), through the online snapshot's watermarks."""
        return request_repair(config, pipeline_name, table, keys)

    @staticmethod
    def cancel_snapshot(
        config: PostgresSourceConfig, pipeline_name: str, request_id: str | None
    ) -> dict[str, Any]:
        """Ask the pipeline to drop snapshot request ``request_id`` (``None``: every request),
        queued, running or failed (``cdc snapshot --cancel``)."""
        return cancel_snapshot(config, pipeline_name, request_id)

    @staticmethod
    def probe(config: PostgresSourceConfig, pipeline_name: str) -> SlotProbe:
        """The slot's health on a side connection, for the metrics sampler
        (:mod:`cdc.metrics.sampler`)."""
        return SlotProbe(config, pipeline_name)

    @staticmethod
    def status(
        config: PostgresSourceConfig, pipeline_name: str, offsets: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The slot's health for ``cdc status`` (retained WAL, active, wal_status; from
        PostgreSQL 17 also inactive_since and invalidation_reason, absent before)."""
        probe = SlotProbe(config, pipeline_name)
        try:
            return {"slot": dict(probe())}
        finally:
            probe.close()

    @staticmethod
    def read_rows(
        config: PostgresSourceConfig,
        schema: str,
        table: str,
        *,
        envelope: EnvelopeOptions = READABLE,
    ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """Every current row of ``schema.table`` as the stream shapes it under the pipeline's
        ``envelope`` options (``cdc verify`` decodes both sides with them)."""
        return table_rows(config, schema, table, envelope)

    read_key = staticmethod(key_row.read_key)  # cdc trace: one row by key, filtered or not

    @staticmethod
    def keyed_by_value(config: PostgresSourceConfig, schema: str, table: str) -> bool:
        """Whether ``schema.table``'s records are keyed by every column for want of a key
        (``cdc verify``: duplicate rows collapse into one in a sink)."""
        return keyed_by_value(config, schema, table)

    @staticmethod
    def position(offsets: Mapping[str, Any]) -> Lsn | None:
        """The commit LSN the stored offsets hold (read-your-writes fences, :mod:`cdc.fence`)."""
        return Lsn.from_offsets(offsets)

    @staticmethod
    def parse_position(text: str) -> Lsn:
        """A position as ``cdc status`` prints it (``0/16B3748``) for ``cdc wait --position``."""
        return parse_position(text)

    @staticmethod
    def current_position(config: PostgresSourceConfig) -> Lsn:
        """``pg_current_wal_lsn()`` at the call, for ``cdc wait --now`` (on a connection of
        its own)."""
        return read_once(CurrentPosition(config))

    @staticmethod
    def position_reader(config: PostgresSourceConfig) -> CurrentPosition:
        """Reads ``pg_current_wal_lsn()`` on one kept connection, for many fences."""
        return CurrentPosition(config)

    @staticmethod
    def drop(config: PostgresSourceConfig, pipeline_name: str) -> list[str]:
        """Drop the pipeline's slot and publication (``cdc drop``)."""
        return drop_replication_objects(config, pipeline_name)

    @staticmethod
    def doctor(config: PostgresSourceConfig, pipeline_name: str) -> list[Check]:
        """The preflight checks of ``cdc doctor`` (:mod:`connectors.postgres.doctor.server`)."""
        return doctor(config, pipeline_name)
