"""The ``postgres`` entry point of ``cdc.sources``."""

from __future__ import annotations

from cdc.source import SourceContext
from connectors.postgres.config import PostgresSourceConfig
from connectors.postgres.lifecycle import drop_replication_objects
from connectors.postgres.source import PostgresSource


class PostgresSourcePlugin:
    """Builds :class:`PostgresSource` from its validated config."""

    config_model = PostgresSourceConfig

    @staticmethod
    def create(config: PostgresSourceConfig, context: SourceContext) -> PostgresSource:
        """A source for ``config``; nothing connects before ``open``."""
        return PostgresSource(config, context)

    @staticmethod
    def drop(config: PostgresSourceConfig, pipeline_name: str) -> list[str]:
        """Drop the pipeline's slot and publication (``cdc drop``)."""
        return drop_replication_objects(config, pipeline_name)
