"""The ``postgres`` entry point of ``cdc.sources``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cdc.envelope.options import READABLE, EnvelopeOptions
from cdc.support import lazy
from connectors.postgres.config import PostgresSourceConfig

# What runs the source is imported by the method that needs it: a command that only reads the
# pipeline's file (validate, status of the log...) loads the config, not the replication stack.
if TYPE_CHECKING:
    from cdc.contracts.checks import Check
    from cdc.contracts.source import Source, SourceContext
    from connectors.postgres.fence import CurrentPosition
    from connectors.postgres.lsn import Lsn
    from connectors.postgres.replication.probe import SlotProbe


class PostgresSourcePlugin:
    """Builds the PostgreSQL source from its validated config."""

    config_model = PostgresSourceConfig

    @staticmethod
    def create(config: PostgresSourceConfig, context: SourceContext) -> Source:
        """A source for ``config``; nothing connects before ``open``.

        It is the streaming :class:`PostgresSource` wrapped by the snapshot layer, which takes
        the initial snapshot and any requested re-snapshot (:mod:`.snapshot.source`).
        """
        from connectors.postgres.snapshot.source import SnapshottingPostgresSource

        return SnapshottingPostgresSource(config, context)

    @staticmethod
    def request_snapshot(
        config: PostgresSourceConfig, pipeline_name: str, table: str, where: str | None
    ) -> dict[str, Any]:
        """Ask the pipeline to re-snapshot ``table`` while it streams (``cdc snapshot``)."""
        from connectors.postgres.snapshot.signal import request_snapshot

        return request_snapshot(config, pipeline_name, table, where)

    @staticmethod
    def request_repair(
        config: PostgresSourceConfig, pipeline_name: str, table: str, keys: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Ask the pipeline to re-read ``keys`` of ``table``, deleting those the table lacks
        (``cdc verify --repair``), through the online snapshot's watermarks."""
        from connectors.postgres.snapshot.signal import request_repair

        return request_repair(config, pipeline_name, table, keys)

    @staticmethod
    def cancel_snapshot(
        config: PostgresSourceConfig, pipeline_name: str, request_id: str | None
    ) -> dict[str, Any]:
        """Ask the pipeline to drop snapshot request ``request_id`` (``None``: every request),
        queued, running or failed (``cdc snapshot --cancel``)."""
        from connectors.postgres.snapshot.signal import cancel_snapshot

        return cancel_snapshot(config, pipeline_name, request_id)

    @staticmethod
    def probe(config: PostgresSourceConfig, pipeline_name: str) -> SlotProbe:
        """The slot's health on a side connection, for the metrics sampler
        (:mod:`cdc.metrics.sampler`)."""
        from connectors.postgres.replication.probe import SlotProbe

        return SlotProbe(config, pipeline_name)

    @staticmethod
    def status(
        config: PostgresSourceConfig, pipeline_name: str, offsets: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The slot's health for ``cdc status`` (retained WAL, active, wal_status; from
        PostgreSQL 17 also inactive_since and invalidation_reason, absent before)."""
        from connectors.postgres.replication.probe import SlotProbe

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
        from connectors.postgres.snapshot.table_rows import table_rows

        return table_rows(config, schema, table, envelope)

    # cdc trace: one row by key, filtered or not
    read_key = lazy.Attribute("connectors.postgres.snapshot.key_row", "read_key")

    @staticmethod
    def keyed_by_value(config: PostgresSourceConfig, schema: str, table: str) -> bool:
        """Whether ``schema.table``'s records are keyed by every column for want of a key
        (``cdc verify``: duplicate rows collapse into one in a sink)."""
        from connectors.postgres.snapshot.table_rows import keyed_by_value

        return keyed_by_value(config, schema, table)

    @staticmethod
    def position(offsets: Mapping[str, Any]) -> Lsn | None:
        """The commit LSN the stored offsets hold (read-your-writes fences, :mod:`cdc.fence`)."""
        from connectors.postgres.lsn import Lsn

        return Lsn.from_offsets(offsets)

    @staticmethod
    def parse_position(text: str) -> Lsn:
        """A position as ``cdc status`` prints it (``0/16B3748``) for ``cdc wait --position``."""
        from connectors.postgres.fence import parse_position

        return parse_position(text)

    @staticmethod
    def current_position(config: PostgresSourceConfig) -> Lsn:
        """``pg_current_wal_lsn()`` at the call, for ``cdc wait --now`` (on a connection of
        its own)."""
        from cdc.fence import read_once
        from connectors.postgres.fence import CurrentPosition

        return read_once(CurrentPosition(config))

    @staticmethod
    def position_reader(config: PostgresSourceConfig) -> CurrentPosition:
        """Reads ``pg_current_wal_lsn()`` on one kept connection, for many fences."""
        from connectors.postgres.fence import CurrentPosition

        return CurrentPosition(config)

    @staticmethod
    def drop(config: PostgresSourceConfig, pipeline_name: str) -> list[str]:
        """Drop the pipeline's slot and publication (``cdc drop``)."""
        from connectors.postgres.lifecycle import drop_replication_objects

        return drop_replication_objects(config, pipeline_name)

    @staticmethod
    def doctor(config: PostgresSourceConfig, pipeline_name: str) -> list[Check]:
        """The preflight checks of ``cdc doctor`` (:mod:`connectors.postgres.doctor.server`)."""
        from connectors.postgres.doctor.server import doctor

        return doctor(config, pipeline_name)
