"""The HTTP sink under the real sink task (:class:`cdc.runtime.sink_task.SinkTask`, an embedded
log) against a real receiver that fails on purpose: 500, 503, 429 with ``Retry-After``,
timeouts (records taken, answer late), dropped connections, refused records, wrong
credentials. Nothing is lost, a record comes twice only under the same id, offsets are
committed only after a 2xx, a stop is prompt during a long wait, and no secret is logged.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog.testing

from cdc.contracts.errors import SinkFatal
from cdc.contracts.events import ChangeEvent, Op
from cdc.contracts.schema import dead_letter_topic
from cdc.log.base import Log
from cdc.runtime.sink_task import SinkRecordStop, SinkTask, group_name
from cdc.support.logging import get_logger
from cdc.testing import wait_until
from cdc.testing.conformance import PIPELINE, TOPIC, SinkConformance, change
from sinks.http import HttpSink, HttpSinkConfig, RetryConfig
from tests.integration.webhook_receiver import Receiver

SECRET = "whsec_" + base64.b64encode(b"faults-test-key-0123456789").decode()
TOKEN = "tok-3f9a1c7e55d2b8a4"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(SECRET)
    yield found
    found.close()
    assert found.bad_signatures == 0
    assert found.conflicts == []  # a record delivered again is the same record


@pytest.fixture
def kit(tmp_path: Path) -> SinkConformance:
    found = SinkConformance()
    found.setup_kit(tmp_path)
    return found


def config(url: str, **options: Any) -> HttpSinkConfig:
    options.setdefault("retry", RetryConfig(initial_backoff_s=0.01, max_backoff_s=0.05))
    return HttpSinkConfig(name="hooks", url=url, secret=SECRET, format="rows", **options)


def task(
    kit: SinkConformance, log: Log, stop: threading.Event, sink: HttpSinkConfig, **options: Any
) -> SinkTask:
    return SinkTask(
        PIPELINE,
        "hooks",
        log,
        lambda: HttpSink(sink, kit.context()),
        [TOPIC],
        stop,
        get_logger(sink="hooks"),
        poll_timeout_s=0.05,
        **options,
    )


def committed(log: Log) -> int:
    return sum(log.committed_offsets(group_name(PIPELINE, "hooks")).values())


def filled(kit: SinkConformance, events: list[ChangeEvent]) -> Log:
    log = kit.log()
    kit.fill_log(log, events)
    return log


class Running:
    """A sink task in a thread, stopped and joined on exit."""

    def __init__(self, sink_task: SinkTask, stop: threading.Event) -> None:
        self.task, self.stop = sink_task, stop
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._body, daemon=True)
        self.thread.start()

    def _body(self) -> None:
        try:
            self.task.run()
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> Running:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)


def names(receiver: Receiver) -> dict[int, tuple[str, int]]:
    rows = receiver.rows("public.kit_items")
    return {orjson.loads(k)["id"]: (r["name"], r["qty"]) for k, r in rows.items()}


def test_faults_lose_nothing_and_repeat_a_record_only_under_its_id(
    kit: SinkConformance, receiver: Receiver
) -> None:
    events = [change(k, Op.CREATE, 10 + k, f"n{k}", k) for k in range(1, 13)]
    events += [change(k, Op.UPDATE, 40 + k, f"m{k}", k) for k in range(1, 13, 2)]
    events += [change(2, Op.DELETE, 60)]
    log = filled(kit, events)
    receiver.hang_s = 0.6
    # Each batch (7 records, requests of 4 and 3) meets a fault or two, so the task's own
    # backoff, which grows while one batch fails, stays short: a 429 after three failures of
    # one batch would be waited out by it (1.6 s by then) whatever Retry-After said.
    receiver.plan("429:1", "ok", "500", "ok", "drop", "ok", "timeout")  # 503: the next test
    stop = threading.Event()
    sink = config(receiver.url, batch_size=4, timeout_s=0.3)
    with Running(task(kit, log, stop, sink, max_records=7), stop) as running:
        wait_until(lambda: committed(log) == 20 or running.error is not None, 60)
    assert running.error is None
    expected = {k: (f"m{k}" if k % 2 else f"n{k}", k) for k in range(1, 13) if k != 2}
    assert names(receiver) == expected
    assert len(receiver.received) == 19  # every change (the tombstone, folded into its delete)
    # The timeout's records were taken and sent again: twice, under the same ids.
    assert max(receiver.received.values()) == 2
    statuses = [r.status for r in receiver.requests]
    assert statuses.count(429) == 1 and statuses.count(500) == 1
    at = next(i for i, r in enumerate(receiver.requests) if r.status == 429)
    waited = receiver.requests[at + 1].at - receiver.requests[at].at
    assert waited >= 0.95, f"Retry-After: 1 not honoured ({waited:.2f} s)"
    log.close()


def test_offsets_are_committed_only_after_a_2xx(kit: SinkConformance, receiver: Receiver) -> None:
    log = filled(kit, [change(k, Op.CREATE, 10 + k, f"n{k}", k) for k in range(1, 6)])
    receiver.down = True
    stop = threading.Event()
    with Running(task(kit, log, stop, config(receiver.url)), stop) as running:
        wait_until(lambda: len(receiver.requests) >= 3, 30, describe="three refused attempts")
        assert committed(log) == 0 and receiver.received == {}
        receiver.down = False
        wait_until(lambda: committed(log) == 5 or running.error is not None, 30)
    assert names(receiver) == {k: (f"n{k}", k) for k in range(1, 6)}
    log.close()


def test_a_refused_record_is_dead_lettered_and_the_others_delivered_once(
    kit: SinkConformance, receiver: Receiver
) -> None:
    log = filled(kit, [change(k, Op.CREATE, 10 + k, f"n{k}", k) for k in range(1, 11)])
    receiver.refuse = lambda record: record["key"] == {"id": 5}
    stop = threading.Event()
    sink = config(receiver.url, batch_size=10)
    running_task = task(kit, log, stop, sink, bad_records="dead_letter", max_records=10)
    with Running(running_task, stop) as running:
        wait_until(lambda: committed(log) == 10 or running.error is not None, 30)
    assert running.error is None
    assert names(receiver) == {k: (f"n{k}", k) for k in range(1, 11) if k != 5}
    assert set(receiver.received.values()) == {1}  # bisected: nothing delivered twice
    letters = log.consumer("check", [dead_letter_topic(PIPELINE)]).poll(10, 1.0)
    assert len(letters) == 1
    letter = orjson.loads(letters[0].value or b"{}")
    assert letter["key"] == {"id": 5} and "HTTP 422" in letter["reason"]
    log.close()


def test_a_refused_record_under_fail_stops_the_sink_with_nothing_committed(
    kit: SinkConformance, receiver: Receiver
) -> None:
    log = filled(kit, [change(k, Op.CREATE, 10 + k, f"n{k}", k) for k in range(1, 4)])
    receiver.refuse = lambda record: record["key"] == {"id": 2}
    with pytest.raises(SinkRecordStop, match="HTTP 422"):
        task(kit, log, threading.Event(), config(receiver.url)).run()
    assert committed(log) == 0
    log.close()


def test_wrong_credentials_stop_the_sink_and_no_secret_reaches_a_log(
    kit: SinkConformance, receiver: Receiver
) -> None:
    log = filled(kit, [change(1, Op.CREATE, 11, "n", 1)])
    receiver.plan("500", "401")
    url = f"{receiver.url}?token={TOKEN}x"
    sink = config(url, headers={"Authorization": f"Bearer {TOKEN}"})
    with structlog.testing.capture_logs() as logs, pytest.raises(SinkFatal) as raised:
        task(kit, log, threading.Event(), sink, bad_records="dead_letter").run()
    assert "HTTP 401" in str(raised.value) and "url and headers" in str(raised.value)
    assert any(e.get("event") == "sink.retrying" for e in logs)  # the 500 was logged
    text = repr(logs) + str(raised.value) + repr(sink)
    assert TOKEN not in text and SECRET not in text
    log.ensure_topics([dead_letter_topic(PIPELINE)])
    assert sum(log.end_offsets(dead_letter_topic(PIPELINE)).values()) == 0  # nothing blamed
    assert committed(log) == 0
    log.close()


def test_max_attempts_stops_the_sink(kit: SinkConformance, receiver: Receiver) -> None:
    log = filled(kit, [change(1, Op.CREATE, 11, "n", 1)])
    receiver.down = True
    retry = RetryConfig(initial_backoff_s=0.01, max_attempts=2)
    with pytest.raises(SinkFatal, match="2 attempts failed in a row"):
        task(kit, log, threading.Event(), config(receiver.url, retry=retry)).run()
    assert len(receiver.requests) == 2 and committed(log) == 0
    log.close()


def test_a_stop_is_prompt_while_a_long_retry_after_is_pending(
    kit: SinkConformance, receiver: Receiver
) -> None:
    log = filled(kit, [change(1, Op.CREATE, 11, "n", 1)])
    receiver.plan("429:600")
    stop = threading.Event()
    with structlog.testing.capture_logs() as logs:
        running = Running(task(kit, log, stop, config(receiver.url)), stop)
        # The task has handed the batch back twice since the 429: the sink, still within the
        # receiver's 600 s, refused without sending (and without sleeping through them).
        wait_until(lambda: sum(e.get("event") == "sink.retrying" for e in logs) >= 3, 30)
    started = time.monotonic()
    stop.set()
    running.thread.join(8)
    assert not running.thread.is_alive() and running.error is None
    assert time.monotonic() - started < 2  # not the 600 s, nor the runner's 8 s grace
    assert len(receiver.requests) == 1 and committed(log) == 0
    log.close()


def test_a_delete_compacted_away_under_a_stopped_sink_arrives_as_its_tombstone(
    kit: SinkConformance, receiver: Receiver
) -> None:
    log = filled(kit, [change(1, Op.CREATE, 10, "a", 1), change(2, Op.CREATE, 11, "b", 2)])
    stop = threading.Event()
    with Running(task(kit, log, stop, config(receiver.url)), stop) as running:
        wait_until(lambda: committed(log) == 2 or running.error is not None, 30)
    assert running.error is None and names(receiver) == {1: ("a", 1), 2: ("b", 2)}
    kit.fill_log(log, [change(1, Op.DELETE, 12)])  # the delete and its tombstone
    assert log.compact()["superseded"] >= 1  # the sink is stopped: its delete is gone
    stop = threading.Event()
    with Running(task(kit, log, stop, config(receiver.url)), stop) as running:
        wait_until(lambda: committed(log) >= 3 or running.error is not None, 30)
    assert running.error is None and names(receiver) == {2: ("b", 2)}
    assert [r["op"] for r in map(orjson.loads, receiver.content.values())] == ["c", "c", "d"]
    log.close()
