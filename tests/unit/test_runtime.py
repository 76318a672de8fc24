"""The runtime's checkpoint order, retries and bad-record policy, on a real embedded log.

The source and sinks here are the shipped fault-injecting fakes (cdc.testing): the behaviour
under test is the runtime's own, and the log is the real SQLite-backed one.
"""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
import pytest

from cdc.contracts.errors import RecordError, SinkFatal, SourceFatal, SourceUnavailable
from cdc.contracts.events import Op, topic_name
from cdc.contracts.schema import dead_letter_topic
from cdc.contracts.source import DeadLetter, SourceBatch
from cdc.log.base import Record, TopicPartition
from cdc.log.embedded import EmbeddedLog
from cdc.runtime.sink_task import SinkTask, group_name
from cdc.runtime.source_task import BadRecordStop, SourceTask
from cdc.support.logging import get_logger
from cdc.testing import FlakySink, ScriptedSource, make_event, wait_until

TOPIC = topic_name("p", "public", "items")


@pytest.fixture
def log(tmp_path: Path) -> EmbeddedLog:
    log = EmbeddedLog(tmp_path / "log", partitions=2)
    yield log
    log.close()


def run_source(
    log: EmbeddedLog, source: ScriptedSource, stop: threading.Event | None = None
) -> BaseException | None:
    stop = stop or threading.Event()
    task = SourceTask("p", log, lambda: source, stop, get_logger(), poll_timeout_s=0.05)
    error: list[BaseException] = []

    def body() -> None:
        try:
            task.run()
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    source.drained.wait(5)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    return error[0] if error else None


def all_records(log: EmbeddedLog, topic: str = TOPIC) -> list[tuple[bytes | None, bytes | None]]:
    out = []
    for partition in log.end_offsets(topic):
        out.extend((r.key, r.value) for r in log.read(topic, partition, 0, 10_000))
    return out


def test_commit_then_ack_and_open_transaction_is_rolled_back(log: EmbeddedLog) -> None:
    source = ScriptedSource(
        [
            SourceBatch(events=[make_event(1), make_event(2)], commit_offsets={"src": {"n": 2}}),
            SourceBatch(
                events=[make_event(3, Op.DELETE, position=2)], commit_offsets={"src": {"n": 3}}
            ),
            SourceBatch(events=[make_event(4, position=3)]),  # its transaction never commits
        ]
    )
    assert run_source(log, source) is None
    assert source.acked == [{"src": {"n": 2}}, {"src": {"n": 3}}]
    assert log.source_offsets() == {"src": {"n": 3}}
    records = all_records(log)
    assert len(records) == 4  # two creates, a delete and its tombstone; key 4 rolled back
    assert sum(1 for _, value in records if value is None) == 1
    assert source.closed == 1


def test_retriable_source_error_reopens_from_stored_offsets(log: EmbeddedLog) -> None:
    source = ScriptedSource(
        [
            SourceBatch(events=[make_event(1)], commit_offsets={"src": {"n": 1}}),
            SourceBatch(events=[make_event(2)]),
            SourceUnavailable("connection lost"),
            SourceBatch(events=[make_event(2)], commit_offsets={"src": {"n": 2}}),
        ]
    )
    assert run_source(log, source) is None
    assert source.opened_with == [{}, {"src": {"n": 1}}]
    assert len(all_records(log)) == 2  # the half transaction before the error left nothing


def test_fatal_source_error_stops_with_it(log: EmbeddedLog) -> None:
    source = ScriptedSource([SourceFatal("replication slot is gone")])
    error = run_source(log, source)
    assert isinstance(error, SourceFatal)
    assert "slot is gone" in str(error)


def test_bad_record_under_fail_policy_names_the_alternative(log: EmbeddedLog) -> None:
    source = ScriptedSource([RecordError("cannot convert money value 'abc'")])
    error = run_source(log, source)
    assert isinstance(error, BadRecordStop)
    assert "bad_records: dead_letter" in str(error)


def test_dead_letters_are_appended_with_their_reason(log: EmbeddedLog) -> None:
    letter = DeadLetter("public.items", {"id": 9}, "bad value", {"raw": "x"})
    source = ScriptedSource(
        [SourceBatch(events=[make_event(1)], commit_offsets={"src": 1}, dead_letters=[letter])]
    )
    assert run_source(log, source) is None
    dead = all_records(log, dead_letter_topic("p"))
    assert len(dead) == 1
    assert b'"reason":"bad value"' in (dead[0][1] or b"")


def test_records_a_source_wrote_itself_are_appended_after_its_events(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "one-partition", partitions=1)  # one order to read back
    source = ScriptedSource(
        [
            SourceBatch(records=[Record(TOPIC, b'{"id":7}', b'{"written":7}')]),
            SourceBatch(
                events=[make_event(1)],
                records=[Record(TOPIC, b'{"id":8}', b'{"written":8}')],
                commit_offsets={"src": 1},
            ),
            SourceBatch(records=[Record(TOPIC, b'{"id":9}', b"{}")]),  # never committed
        ]
    )
    try:
        assert run_source(log, source) is None
        assert log.source_offsets() == {"src": 1}
        records = log.read(TOPIC, 0, 0, 100)
    finally:
        log.close()
    assert [r.key for r in records] == [b'{"id":7}', b'{"id":1}', b'{"id":8}']
    assert [records[0].value, records[2].value] == [b'{"written":7}', b'{"written":8}']
    assert records[1].value is not None and records[1].value.startswith(b'{"before"')


def fill(log: EmbeddedLog, keys: range) -> None:
    source = ScriptedSource(
        [SourceBatch(events=[make_event(k, position=k)], commit_offsets={"src": k}) for k in keys]
    )
    assert run_source(log, source) is None


def sink_task(
    log: EmbeddedLog, sink: FlakySink, stop: threading.Event, bad_records: str = "fail"
) -> SinkTask:
    return SinkTask(
        "p",
        "s",
        log,
        lambda: sink,
        [TOPIC],
        stop,
        get_logger(),
        bad_records=bad_records,
        max_records=3,
        poll_timeout_s=0.05,
    )


def committed_total(log: EmbeddedLog) -> int:
    return sum(log.committed_offsets(group_name("p", "s")).values())


def test_failing_flush_means_no_commit(log: EmbeddedLog) -> None:
    fill(log, range(1, 6))
    sink = FlakySink(fatal_flush=True)
    task = sink_task(log, sink, threading.Event())
    with pytest.raises(SinkFatal):
        task.run()
    assert sink.flush_attempts == 1
    assert committed_total(log) == 0


def test_retriable_flush_failures_retry_the_batch_then_commit(log: EmbeddedLog) -> None:
    fill(log, range(1, 6))
    sink = FlakySink(fail_flushes=2)
    stop = threading.Event()
    task = sink_task(log, sink, stop)
    thread = threading.Thread(target=task.run)
    thread.start()
    try:
        wait_until(lambda: committed_total(log) >= 5, 10)
    finally:
        stop.set()
        thread.join(5)
    assert committed_total(log) == 5
    assert sorted(r.offset for r in sink.flushed) == sorted(
        r.offset for p in log.end_offsets(TOPIC) for r in log.read(TOPIC, p, 0, 100)
    )
    assert len(sink.rows) == 5


def test_sink_down_holds_back_and_loses_nothing(log: EmbeddedLog) -> None:
    fill(log, range(1, 11))
    is_down = threading.Event()
    is_down.set()
    sink = FlakySink(down=is_down.is_set)
    stop = threading.Event()
    task = sink_task(log, sink, stop)
    thread = threading.Thread(target=task.run)
    thread.start()
    try:
        wait_until(lambda: sink.refused >= 2, 15, describe="the sink tried, then retried")
        assert committed_total(log) == 0 and not sink.flushed
        is_down.clear()
        wait_until(lambda: committed_total(log) >= 10, 15)
    finally:
        stop.set()
        thread.join(5)
    assert committed_total(log) == 10
    assert len(sink.rows) == 10


def test_bad_record_goes_to_dead_letter_topic_and_the_rest_applies(log: EmbeddedLog) -> None:
    fill(log, range(1, 6))
    sink = FlakySink(bad_keys={3})
    stop = threading.Event()
    task = sink_task(log, sink, stop, bad_records="dead_letter")
    thread = threading.Thread(target=task.run)
    thread.start()
    try:
        wait_until(lambda: committed_total(log) >= 5, 10)
    finally:
        stop.set()
        thread.join(5)
    assert sorted(int(k.split(": ")[1].rstrip("}")) for k in sink.rows) == [1, 2, 4, 5]
    dead = all_records(log, dead_letter_topic("p"))
    assert len(dead) == 1 and b"cannot apply key" in (dead[0][1] or b"")


def test_bad_record_under_fail_policy_stops_without_commit(log: EmbeddedLog) -> None:
    fill(log, range(1, 3))
    sink = FlakySink(bad_keys={1})
    task = sink_task(log, sink, threading.Event())
    with pytest.raises(RecordError, match="bad_records: dead_letter"):
        task.run()
    assert committed_total(log) == 0
    assert TopicPartition(TOPIC, 0) not in log.committed_offsets(group_name("p", "s"))


@pytest.mark.parametrize(
    "doc",
    [
        b'{"schema":{"type":"struct","fields":[]},"payload":{"after":{"id":1}}}',
        b'{"schema":{"type":"int64"},"payload":7}',
        b'{"schema":{"type":"struct"},"payload":null}',
        b'{"schema":{"a":1,"payload":{"x":1}}}',  # "payload" inside the schema: no wrapper
        b'{"schema":{"a":1,"payload":{}},"payload":3}',
        b'{"schema":{"type":"x"},"payload":1,"extra":2}',  # three keys: not a wrapper
        b'{"payload":1,"schema":{"type":"x"}}',  # the other order is still a wrapper
        b'{"schema":{"t":1},"payload":"a,\\"payload\\":b"}',
        b'{"before":null,"after":{"id":1}}',
        b"[1,2]",
    ],
)
def test_payload_of_is_unwrap_of_the_whole_document(doc: bytes) -> None:
    from cdc.runtime.sink_task import payload_of, unwrap

    assert payload_of(doc) == unwrap(orjson.loads(doc))


def test_records_a_source_wrote_for_its_changes_are_appended_counted_and_timed(
    log: EmbeddedLog,
) -> None:
    """A stream's changes written as records (SourceContext.write_records): appended after the
    batch's events, in order; counted as changes, a tombstone not; the lag clock fed their
    commit time."""
    created = Record(TOPIC, b'{"id":1}', b'{"op":"c"}', b"[9,0]")
    deleted = Record(TOPIC, b'{"id":2}', b'{"op":"d"}', b"[9,1]")
    tombstone = Record(TOPIC, b'{"id":2}', None)
    written = SourceBatch(
        records=[created, deleted, tombstone],
        record_ops=["c", "d", ""],
        ts_ms=1_700_000_000_000,
        commit_offsets={"src": {"n": 9}},
    )
    source = ScriptedSource([SourceBatch(events=[make_event(3)]), written])
    stop = threading.Event()
    task = SourceTask("p", log, lambda: source, stop, get_logger(), poll_timeout_s=0.05)
    thread = threading.Thread(target=task.run)
    thread.start()
    source.drained.wait(5)
    stop.set()
    thread.join(5)
    assert source.acked == [{"src": {"n": 9}}]
    values = sorted((key or b"", value or b"") for key, value in all_records(log))
    assert [key for key, _ in values] == [b'{"id":1}', b'{"id":2}', b'{"id":2}', b'{"id":3}']
    assert (values[0][1], values[1][1] + values[2][1]) == (b'{"op":"c"}', b'{"op":"d"}')
    assert task.events_appended == 3  # the event, the create and the delete
    assert task.lag._last_ts_ms == 1_700_000_000_000
