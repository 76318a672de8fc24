"""The session's Kafka broker before each test (``ensure_serving``, which tests/conftest.py
calls for every test that uses ``kafka_server``): a broker a test left stopped is brought back on
its address; one that cannot come back fails every later test at once, with the reason, instead
of each waiting out its timeouts on ``Connection refused``.

On a private broker of its own: the test stops it and takes its port.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.services.common import ServiceError
from tests.services.kafka import LocalKafka, _lists_topics
from tests.services.ports import LOOPBACK


@pytest.fixture
def broker() -> Iterator[LocalKafka]:
    server = LocalKafka()
    server.start()
    yield server
    server.close()


def test_a_stopped_broker_comes_back_or_fails_every_test_at_once(broker: LocalKafka) -> None:
    address = broker.bootstrap_servers
    broker.ensure_serving()  # serving: nothing to do
    broker.stop()  # as a test that stopped it and failed before starting it again
    broker.ensure_serving()
    assert broker.bootstrap_servers == address and _lists_topics(address)

    broker.stop()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        # Its port taken while it was down: it cannot come back where its clients look.
        taken.bind((LOOPBACK, broker.port))
        taken.listen()
        with pytest.raises(ServiceError, match="could not be started again") as first:
            broker.ensure_serving()
        assert address in str(first.value) and str(broker.log_file) in str(first.value)
        started = time.monotonic()
        for _ in range(3):  # the tests after it: the same error, without trying again
            with pytest.raises(ServiceError) as again:
                broker.ensure_serving()
            assert str(again.value) == str(first.value)
        assert time.monotonic() - started < 0.5
