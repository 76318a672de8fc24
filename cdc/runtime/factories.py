"""The factories a pipeline run builds its source and sinks with, from their plugins: each task
calls its factory again after a retriable failure, so a reconnect starts from a fresh object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from cdc.config.models import SinkConfig
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.sink import Sink, SinkContext
from cdc.contracts.source import Source, SourceContext
from cdc.log.base import Log
from cdc.runtime import fingerprints
from cdc.runtime.schemas import SchemaCatalog
from cdc.support.logging import Logger


def build_source(
    pipeline: Pipeline,
    log: Log,
    logger: Logger,
    filters: fingerprints.StartPlan | None = None,
) -> Callable[[], Source]:
    plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
    context = SourceContext(
        pipeline=pipeline.name,
        log=log,
        logger=logger,
        on_bad_record=pipeline.file.bad_records,
        snapshot_mode=pipeline.source.snapshot,
        envelope=pipeline.envelope,
        transforms=pipeline.chain(),
        resnapshot=() if filters is None else filters.resnapshot,
        refiltered=() if filters is None else filters.refiltered,
        write_records=True,  # the source task takes them (SourceTask._append)
    )

    def factory() -> Source:
        source: Source = plugin.create(pipeline.source, context)
        return source

    return factory


def build_sink(
    pipeline: Pipeline, config: SinkConfig, catalog: SchemaCatalog, logger: Logger
) -> Callable[[], Sink]:
    plugin = plugins.load(plugins.SINK_GROUP, config.type)
    context = SinkContext(
        pipeline=pipeline.name,
        sink_name=config.name,
        tables=pipeline.sink_tables(config),
        schemas=catalog,
        logger=logger,
        envelope=pipeline.envelope,
        hidden=masked_columns(pipeline),
    )

    def factory() -> Sink:
        sink: Sink = plugin.create(config, context)
        return sink

    return factory


def masked_columns(pipeline: Pipeline) -> dict[tuple[str, str], frozenset[str]]:
    """By table (after routing), the columns the source's masks hide: a sink's errors name
    them but never print their values (:attr:`cdc.contracts.sink.SinkContext.hidden`)."""
    chain = pipeline.chain()
    hidden: dict[tuple[str, str], frozenset[str]] = {}
    for entry in pipeline.source.tables:
        if entry.mask:
            schema, _, table = chain.table(entry.name).partition(".")
            hidden[(schema, table)] = hidden.get((schema, table), frozenset()) | set(entry.mask)
    return hidden


def source_record_rows(pipeline: Pipeline) -> Callable[[str, Any, Any], tuple[Any, Any]] | None:
    """The source plugin's read-side decoding of its records for the sinks (its optional
    ``record_rows``; ``None``: its records are rows already)."""
    rows = getattr(plugins.load(plugins.SOURCE_GROUP, pipeline.source.type), "record_rows", None)
    return cast("Callable[[str, Any, Any], tuple[Any, Any]] | None", rows)
