"""The connection watch's decisions without a broker: one ``lost`` per outage, ``restored``
on the next call that reached the cluster, late errors of a finished outage ignored."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import structlog
from confluent_kafka import KafkaError

from cdc.log.kafka import common as kafka_common
from cdc.log.kafka.common import ConnectionWatch


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, object]]]:
    with structlog.testing.capture_logs() as logs:
        # The module's logger was bound at import, before the capture was configured.
        monkeypatch.setattr(kafka_common, "_logger", structlog.get_logger())
        yield logs


def names(logs: list[dict[str, object]]) -> list[object]:
    return [entry["event"] for entry in logs]


def test_one_lost_per_outage_then_restored(captured: list[dict[str, object]]) -> None:
    watch = ConnectionWatch("consumer", group="g")
    watch.reached()  # nothing was lost: nothing to say
    watch.on_error(KafkaError(KafkaError._TRANSPORT, "broker:9092: Connection refused"))
    watch.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    watch.on_error(KafkaError(KafkaError._TRANSPORT, "broker:9092: Connection refused"))
    assert watch.lost
    watch.reached()
    watch.reached()
    assert names(captured) == ["kafka.connection_lost", "kafka.connection_restored"]
    lost, restored = captured
    assert (lost["client"], lost["group"], lost["error"]) == ("consumer", "g", "_TRANSPORT")
    assert isinstance(restored["down_s"], float) and not watch.lost


def test_late_transport_errors_after_a_restore_start_no_outage(
    captured: list[dict[str, object]],
) -> None:
    watch = ConnectionWatch("producer")
    watch.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    watch.reached()
    watch.on_error(KafkaError(KafkaError._TRANSPORT, "queued during the outage"))
    assert not watch.lost
    watch.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert watch.lost
    assert names(captured) == [
        "kafka.connection_lost",
        "kafka.connection_restored",
        "kafka.connection_lost",
    ]


def test_other_errors_are_logged_as_they_come(captured: list[dict[str, object]]) -> None:
    watch = ConnectionWatch("consumer")
    watch.on_error(KafkaError(KafkaError._MSG_TIMED_OUT, "timed out"))
    assert names(captured) == ["kafka.client_error"] and not watch.lost


def test_an_answer_to_a_call_made_before_the_loss_does_not_end_it(
    captured: list[dict[str, object]],
) -> None:
    # A commit sent just before the broker went away, answered after the loss was logged:
    # the consumer said "restored" 0.0 s after "lost" and nothing more for the whole outage.
    watch = ConnectionWatch("consumer", group="g")
    sent = time.monotonic()
    watch.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    watch.reached(since=sent)
    assert watch.lost and names(captured) == ["kafka.connection_lost"]
    watch.reached(since=time.monotonic())  # a call made after the loss was answered
    assert not watch.lost
    assert names(captured) == ["kafka.connection_lost", "kafka.connection_restored"]
