"""The envelope encoding stored with the log (cdc.log.encoding), on the embedded and the Kafka log.

A log keeps the encoding it was written with; a run under another one is refused, naming each
option, unless the change is accepted, which records where the new encoding starts.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc.config.models import KafkaLogConfig
from cdc.contracts.schema import Column, TableSchema, schema_record, schema_topic
from cdc.contracts.sink import SinkRecord
from cdc.envelope.options import DEBEZIUM_DEFAULTS, READABLE
from cdc.log.base import Log, Record
from cdc.log.embedded import EmbeddedLog
from cdc.log.encoding import (
    DEBEZIUM,
    LEGACY,
    EncodingFollower,
    EnvelopeChanged,
    StoredEncoding,
    ensure_encoding,
    read_encoding,
)
from cdc.log.kafka import KafkaLog
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_task import SinkTask
from cdc.support.logging import get_logger
from cdc.testing import wait_until
from tests.unit.log_suite import append, read_all

LOGGER = get_logger(test="stored_encoding")
Opened = tuple[Log, str]


@pytest.fixture(params=["embedded", "kafka"])
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Opened]]:
    """Opens the same pipeline's log (a fresh name per test) each time it is called."""
    pipeline = f"enc_{uuid.uuid4().hex[:10]}"
    logs: list[Log] = []

    def open_log() -> Opened:
        log: Log
        if request.param == "embedded":
            log = EmbeddedLog(tmp_path / "log")
        else:
            server: Any = request.getfixturevalue("kafka_server")
            config = KafkaLogConfig(type="kafka", bootstrap_servers=server.bootstrap_servers)
            log = KafkaLog(pipeline, config)
        logs.append(log)
        return log, pipeline

    yield open_log
    for log in logs:
        log.close()


def _write_table_records(log: Log, pipeline: str) -> str:
    """What an older cdc wrote: a table's schema and a change, no stored encoding."""
    topic = f"{pipeline}.public.items"
    log.ensure_topics([topic, schema_topic(pipeline)])
    schema = TableSchema("postgresql", "public", "items", (Column("id", "int4", key=True),), 1)
    value = orjson.dumps({"before": None, "after": {"id": 1}, "op": "c"})
    append(log, [schema_record(pipeline, schema), Record(topic, b'{"id":1}', value)])
    return topic


def test_an_empty_log_stores_the_pipelines_encoding_once(opened: Callable[[], Opened]) -> None:
    log, pipeline = opened()
    assert read_encoding(log, pipeline) is None
    stored = ensure_encoding(log, pipeline, DEBEZIUM_DEFAULTS, False, LOGGER)
    assert stored == StoredEncoding(DEBEZIUM, DEBEZIUM_DEFAULTS.encoding())
    again, _ = opened()
    assert read_encoding(again, pipeline) == stored
    ensure_encoding(again, pipeline, DEBEZIUM_DEFAULTS, False, LOGGER)
    written = [r for r in read_all(again, schema_topic(pipeline)) if r.value is not None]
    assert len(written) == 1  # the same encoding again: nothing written


def test_a_log_with_records_and_no_encoding_is_legacy_and_refused(
    opened: Callable[[], Opened],
) -> None:
    log, pipeline = opened()
    _write_table_records(log, pipeline)
    assert read_encoding(log, pipeline) == StoredEncoding(LEGACY)
    with pytest.raises(EnvelopeChanged) as refused:
        ensure_encoding(log, pipeline, READABLE, False, LOGGER)
    where = [path for path, _ in refused.value.problems]
    assert where[:-1] == [f"envelope.{name}" for name in READABLE.encoding()]
    assert "'legacy'" in refused.value.problems[0][1]
    ways_out = refused.value.problems[-1][1]
    for hint in ("envelope: block back", "log.path", "new pipeline name", "--accept-envelope"):
        assert hint in ways_out
    assert read_encoding(log, pipeline) == StoredEncoding(LEGACY)  # refused: nothing stored


def test_an_accepted_change_is_stored_with_where_it_starts(opened: Callable[[], Opened]) -> None:
    log, pipeline = opened()
    ensure_encoding(log, pipeline, READABLE, False, LOGGER)
    topic = _write_table_records(log, pipeline)
    ends = {str(p): o for p, o in log.end_offsets(topic).items()}
    with pytest.raises(EnvelopeChanged) as refused:
        ensure_encoding(log, pipeline, DEBEZIUM_DEFAULTS, False, LOGGER)
    changed = {path: message for path, message in refused.value.problems[:-1]}
    assert changed["envelope.decimal.handling.mode"] == (
        "the log was written with 'string', the file says 'precise'"
    )
    assert set(changed) == {
        "envelope.time.precision.mode",
        "envelope.decimal.handling.mode",
        "envelope.interval.handling.mode",
        "envelope.binary.handling.mode",
        "envelope.schemas.enable",
    }
    stored = ensure_encoding(log, pipeline, DEBEZIUM_DEFAULTS, True, LOGGER)
    reopened, _ = opened()
    assert read_encoding(reopened, pipeline) == stored
    assert stored.options == DEBEZIUM_DEFAULTS.encoding()
    assert stored.since == {topic: ends}
    assert [p["options"] for p in stored.previous] == [READABLE.encoding()]
    assert stored.envelope() == DEBEZIUM_DEFAULTS.model_copy(update={"skipped_operations": "none"})
    ensure_encoding(reopened, pipeline, DEBEZIUM_DEFAULTS, False, LOGGER)  # now it matches


def test_the_schema_catalog_does_not_take_the_encoding_for_a_table(
    opened: Callable[[], Opened],
) -> None:
    log, pipeline = opened()
    _write_table_records(log, pipeline)
    ensure_encoding(log, pipeline, READABLE, True, LOGGER)
    catalog = SchemaCatalog(log, pipeline, wait_s=0.5)
    found = catalog.get("public", "items")
    assert found is not None and found.key_columns == ["id"]


def test_a_follower_sees_each_change_once(opened: Callable[[], Opened]) -> None:
    log, pipeline = opened()
    follower = EncodingFollower(log, pipeline, paced=False)
    assert not follower.refresh() and follower.newest is None  # nothing stored yet
    first = ensure_encoding(log, pipeline, READABLE, False, LOGGER)
    assert follower.refresh() and follower.newest == first
    _write_table_records(log, pipeline)  # a table's schema: no new encoding
    assert not follower.refresh()
    changed = ensure_encoding(log, pipeline, DEBEZIUM_DEFAULTS, True, LOGGER)
    assert follower.refresh() and follower.newest == changed
    assert not follower.refresh()
    late = EncodingFollower(log, pipeline)  # one started after both: the newest at once
    assert late.refresh() and late.newest == changed


def test_a_running_sink_task_follows_a_change_made_meanwhile(
    opened: Callable[[], Opened],
) -> None:
    log, pipeline = opened()
    ensure_encoding(log, pipeline, READABLE, False, LOGGER)
    topic = _write_table_records(log, pipeline)
    seen: list[SinkRecord] = []
    task = SinkTask(
        pipeline,
        "s",
        log,
        lambda: _Collecting(seen),
        [topic],
        threading.Event(),
        LOGGER,
        poll_timeout_s=0.05,
    )
    task._sink = _Collecting(seen)
    task._subscribe()
    try:
        _step_until(task, seen, 1)
        # Another process (cdc run --role source) accepts a change and writes under it.
        ensure_encoding(log, pipeline, DEBEZIUM_DEFAULTS, True, LOGGER)
        # A source takes longer to start than a paced follower takes to look (at most 1 s; on
        # the embedded log a few ms): it writes once the follower's pause is over.
        follower = task._encoding
        wait_until(lambda: time.monotonic() >= follower._due, 5, 0.005, describe="the pause")
        value = orjson.dumps({"before": None, "after": {"id": 2}, "op": "c"})
        append(log, [Record(topic, b'{"id":2}', value)])
        _step_until(task, seen, 2)
    finally:
        task._close()
    old, new = seen
    assert old.era is not None and old.era.options == READABLE.model_copy(
        update={"skipped_operations": "none"}
    )
    assert new.era is not None and new.era.options is not None
    assert new.era.options.decimal_handling_mode == "precise"


def _step_until(task: SinkTask, seen: list[SinkRecord], count: int) -> None:
    deadline = time.monotonic() + 30
    while len(seen) < count:
        assert time.monotonic() < deadline, seen
        task.step()


class _Collecting:
    """A sink that keeps what it is given."""

    def __init__(self, seen: list[SinkRecord]) -> None:
        self._seen = seen

    def open(self) -> None: ...
    def stored_offsets(self) -> None:
        return None

    def write(self, records: Sequence[SinkRecord]) -> None:
        self._seen.extend(records)

    def flush(self) -> None: ...
    def close(self) -> None: ...
    def reset_table(self, table: tuple[str, str], partitions: Sequence[Any]) -> None: ...
