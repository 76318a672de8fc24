"""Build a copy of a sink from the log (``cdc sink FILE NAME --rebuild --into ...``).

The copy is the sink's configuration with the fields that place its store (its plugin's
``rebuild_into``: a DuckDB path, a Redis URL, a PostgreSQL DSN or schema...) changed. It is
built by the sink's own task over :class:`~cdc.runtime.log_replay.ReplayLog`: every topic of
the sink from the copy's stored offsets up to where the log ended when the rebuild began, with
the source database never read. Interrupted, it resumes from what the copy stored.

Handing over: the copy keeps its offsets with its data, so swapped in as the sink (its path put
in the file), it streams on from exactly what it applied. A new copy first records offset 0
for every partition of each table (:meth:`~cdc.contracts.sink.Sink.reset_table` on an empty
store): a partition empty at the rebuild then has an offset in the copy, and the sink never
falls back to the old store's consumer group, which may be further on, for it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from pydantic import SecretStr, ValidationError

from cdc.config.models import SinkConfig
from cdc.config.pipeline import Pipeline
from cdc.contracts.errors import CdcError
from cdc.contracts.events import topic_name
from cdc.contracts.sink import Sink
from cdc.log.base import Log, TopicPartition
from cdc.log.offsets import end_offsets
from cdc.runtime.factories import build_sink, source_record_rows
from cdc.runtime.log_replay import ReplayLog
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_task import SinkTask
from cdc.support.logging import Logger, get_logger


class CopyRefused(CdcError):
    """``--into`` cannot make a copy of this sink (a usage error: exit 2)."""


def copy_config(plugin: Any, config: SinkConfig, into: tuple[str, ...]) -> SinkConfig:
    """``config`` placed elsewhere: each ``--into`` value is ``FIELD=VALUE`` for one of the
    plugin's ``rebuild_into`` fields, or a bare value for the first of them.

    Raises:
        CopyRefused: the sink type cannot be copied, a field is not one that places it, the
            value is invalid, or the copy is the sink's own store.
    """
    fields: tuple[str, ...] = tuple(getattr(plugin, "rebuild_into", ()))
    if not fields:
        raise CopyRefused(
            f"sink type {config.type!r} cannot be rebuilt into a copy: it keeps no offsets "
            "beside its data to hand over from (rebuild it in place: --rebuild without --into)"
        )
    changes = dict(_assignment(value, fields) for value in into)
    data = {**config.model_dump(by_alias=True), **changes}
    try:
        copy: SinkConfig = plugin.config_model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise CopyRefused(f"--into: {problems}") from None
    if all(_same(getattr(copy, f), getattr(config, f)) for f in _attrs(plugin, fields)):
        raise CopyRefused(
            "--into names the sink's own store: give a new place for the copy "
            f"({', '.join(fields)})"
        )
    return copy


def _assignment(value: str, fields: tuple[str, ...]) -> tuple[str, str]:
    name, sep, rest = value.partition("=")
    if sep and name in fields:
        return name, rest
    return fields[0], value


def _attrs(plugin: Any, fields: tuple[str, ...]) -> list[str]:
    """The model's attribute names of ``fields`` (a field may be given by its alias)."""
    model = plugin.config_model.model_fields
    by_alias = {info.alias: name for name, info in model.items() if info.alias}
    return [by_alias.get(f, f) for f in fields]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, SecretStr) and isinstance(b, SecretStr):
        return a.get_secret_value() == b.get_secret_value()
    return bool(a == b)


@dataclass
class CopyResult:
    records: int
    seconds: float
    interrupted: bool


def build_copy(pipeline: Pipeline, config: SinkConfig, log: Log, logger: Logger) -> CopyResult:
    """Build the copy ``config`` from ``log`` up to its end now (SIGINT/SIGTERM: stop after
    the current batch, resumable).

    Raises:
        CdcError: the copy's store or the log failed (what was applied stays, with its
            offsets: run it again to resume).
    """
    catalog = SchemaCatalog(log, pipeline.name)
    factory = build_sink(pipeline, config, catalog, logger)
    topics = [topic_name(pipeline.name, s, t) for s, t in pipeline.sink_tables(config)]
    _mark_new_tables(factory, pipeline, config, log, logger)
    stop = threading.Event()
    task = SinkTask(
        pipeline.name,
        config.name,
        ReplayLog(log, stop).as_log(),
        factory,
        topics,
        stop,
        logger,
        bad_records=pipeline.file.bad_records,
        max_records=config.batch_records,
        max_bytes=config.batch_bytes,
        tables=pipeline.sink_tables(config),
        rows=source_record_rows(pipeline),
    )
    interrupted = threading.Event()
    started = time.monotonic()

    def on_signal() -> None:
        interrupted.set()
        stop.set()

    with _signals_set(on_signal):
        task.run()
    return CopyResult(task.records_applied, time.monotonic() - started, interrupted.is_set())


def _mark_new_tables(
    factory: Callable[[], Sink], pipeline: Pipeline, config: SinkConfig, log: Log, logger: Logger
) -> None:
    """Offset 0 for every partition of each table the copy holds nothing of yet."""
    sink = factory()
    sink.open()
    try:
        stored = sink.stored_offsets()
        if stored is None:
            raise CopyRefused(f"sink {config.name} keeps no offsets with its data")
        held = {tp.topic for tp in stored}
        for schema, table in pipeline.sink_tables(config):
            topic = topic_name(pipeline.name, schema, table)
            if topic in held:
                continue  # a copy begun before: resumed from what it stored
            log.ensure_topics([topic])
            partitions = [TopicPartition(topic, p) for p in sorted(end_offsets(log, topic))]
            sink.reset_table((schema, table), partitions)
            logger.debug("sink.rebuild_into.table_marked", table=f"{schema}.{table}")
    finally:
        sink.close()


def keeps_offsets(pipeline: Pipeline, config: SinkConfig, log: Log) -> bool:
    """Whether the sink stores its offsets beside its data (what a reset and a copy need):
    asked of the sink, opened once (where no process runs it)."""
    factory = build_sink(pipeline, config, SchemaCatalog(log, pipeline.name), get_logger())
    sink = factory()
    sink.open()
    try:
        return sink.stored_offsets() is not None
    finally:
        sink.close()


class _signals_set:
    """SIGINT/SIGTERM call ``handler`` while inside (the previous handlers come back after)."""

    def __init__(self, handler: Callable[[], Any]) -> None:
        self._handler = handler
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> None:
        def on_signal(_signum: int, _frame: FrameType | None) -> None:
            self._handler()

        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, on_signal)

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
