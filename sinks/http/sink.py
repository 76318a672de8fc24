"""Signed JSON batches POSTed to a webhook receiver, acknowledged by its 2xx.

The sink keeps no offsets: the runner commits the consumer offsets after ``flush`` returns,
and ``flush`` returns only once every pending record was answered 2xx. A crash before that
sends them again, under the same record ids (:mod:`sinks.http.wire`): delivery is at least
once, and the receiver's effects exactly once when it de-duplicates by id and orders a key's
changes by ``position``.

Retries. A failed request (5xx, 408, 429, a timeout, a lost connection) raises
:class:`SinkUnavailable` and the runner's task tries the batch again; the sink never sleeps
through a backoff itself. Why: only the task sees the pipeline stopping (it waits on the stop
event), and a stopping pipeline gives its tasks 8 s; a sink asleep on a ``Retry-After: 600``
would hold ``cdc run`` past that and be killed. So the sink keeps its own schedule (full-jitter
backoff or ``Retry-After``) as a time before which it refuses to send (raising again, cheaply),
and waits itself only for the last fraction of a second of it. Records delivered before the
failure are remembered and not sent again when the task hands the same batch back.

A refused batch (another 4xx) is split in halves, each sent alone, down to the record the
receiver refuses: that one goes to the pipeline's ``bad_records`` policy (a dead letter, or the
sink stops), the others are delivered.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import NoReturn

import httpx

from cdc.contracts.errors import RecordError, SinkFatal, SinkUnavailable
from cdc.contracts.sink import SinkContext, SinkRecord
from cdc.log.base import TopicPartition
from sinks.http import signing, wire
from sinks.http.config import HttpSinkConfig
from sinks.http.retrying import Delays, Outcome, outcome, retry_after_s
from sinks.http.wire import Entry, Place

#: The longest wait the sink takes itself before a send (see the module docstring).
SHORT_WAIT_S = 0.5


def client(config: HttpSinkConfig) -> httpx.Client:
    """A pooled client with keep-alive; the configured headers on every request."""
    headers = {name: value.get_secret_value() for name, value in config.headers.items()}
    headers["content-type"] = "application/json"
    return httpx.Client(
        timeout=httpx.Timeout(config.timeout_s),
        limits=httpx.Limits(max_connections=2, max_keepalive_connections=2, keepalive_expiry=30),
        headers=headers,
        follow_redirects=False,
    )


class HttpSink:
    """POSTs ``{"pipeline", "sink", "records": [...]}`` batches of ``batch_size`` records."""

    def __init__(self, config: HttpSinkConfig, context: SinkContext) -> None:
        self._config = config
        self._context = context
        self._url = config.url.get_secret_value()
        self._key = signing.signing_key(config.secret.get_secret_value())
        self._prefix = f"{context.pipeline}."
        self._client: httpx.Client | None = None
        self._pending: dict[Place, Entry] = {}  # written, not yet answered 2xx
        self._delivered: set[Place] = set()  # answered 2xx, in a flush not finished yet
        self._last: SinkRecord | None = None  # the last record written: a tombstone's delete?
        self._delays = Delays(config.retry)
        self._not_before = 0.0

    def open(self) -> None:
        self._client = client(self._config)

    def stored_offsets(self) -> Mapping[TopicPartition, int] | None:
        return None  # the receiver holds no offsets: the runner commits after each flush

    def write(self, records: Sequence[SinkRecord]) -> None:
        form, prefix = self._config.format, self._prefix
        pending, delivered = self._pending, self._delivered
        before = self._last  # a batch may be cut between a delete and its tombstone
        for record in records:
            place = (record.topic, record.partition, record.offset)
            if place in pending or place in delivered:
                before = record
                continue  # the task handing back a batch a failed flush had partly delivered
            if record.value is None and wire.follows_its_delete(record, before):
                continue  # the delete just before it is sent: the receiver would drop its twin
            before = record
            entry = wire.entry(record, form, prefix)
            if entry is not None:
                pending[place] = entry
        self._last = before

    def flush(self) -> None:
        """Deliver every pending record, ``batch_size`` a request, in log order.

        Raises:
            SinkUnavailable: a request failed and may succeed later (or its wait is not over).
            RecordError: the receiver refused one record (``record`` names it).
            SinkFatal: the URL or the credentials are refused, or ``max_attempts`` failed.
        """
        if self._pending:
            self._wait_turn()
            entries = list(self._pending.values())
            size = self._config.batch_size
            for start in range(0, len(entries), size):
                self._deliver(entries[start : start + size])
        self._delivered.clear()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def reset_table(self, table: tuple[str, str], partitions: Sequence[TopicPartition]) -> None:
        raise SinkFatal(
            f"the http sink cannot reset {table[0]}.{table[1]}: a receiver's store is not the "
            "sink's to empty, and the sink keeps no offsets to start the topic again from"
        )

    def _wait_turn(self) -> None:
        remaining = self._not_before - time.monotonic()
        if remaining > SHORT_WAIT_S:
            raise SinkUnavailable(f"http sink: {remaining:.1f} s left to wait before a retry")
        if remaining > 0:
            time.sleep(remaining)

    def _deliver(self, batch: list[Entry]) -> None:
        response = self._post(batch)
        status = response.status_code
        result = outcome(status)
        if result is Outcome.DELIVERED:
            self._delivered_batch(batch)
        elif result is Outcome.RETRY:
            self._failed(f"HTTP {status}", retry_after_s(response.headers.get("retry-after")))
        elif result is Outcome.REFUSED:
            self._refused(batch, status)
        else:
            raise SinkFatal(
                f"the receiver at {self._config.shown_url} answered HTTP {status} "
                f"{response.reason_phrase}: check the sink's url and headers"
            )

    def _post(self, batch: list[Entry]) -> httpx.Response:
        assert self._client is not None, "open() first"
        message = wire.message_id(batch)
        body = wire.body(self._context.pipeline, self._context.sink_name, batch)
        headers = signing.headers(self._key, message, int(time.time()), body)
        try:
            return self._client.post(self._url, content=body, headers=headers)
        except httpx.TransportError as exc:  # a timeout, a refused or lost connection
            self._failed(type(exc).__name__, None, exc)

    def _delivered_batch(self, batch: list[Entry]) -> None:
        for entry in batch:
            del self._pending[entry.place]
            self._delivered.add(entry.place)
        self._delays.reset()

    def _refused(self, batch: list[Entry], status: int) -> None:
        """Bisect a refused batch down to the record the receiver refuses alone."""
        if len(batch) == 1:
            bad = batch[0]
            del self._pending[bad.place]  # the task drops it from the batch it hands back
            if self._last is bad.record:
                self._last = None  # a refused delete does not stand for its tombstone
            raise RecordError(f"the receiver refused record {bad.id}: HTTP {status}", bad.record)
        middle = len(batch) // 2
        self._deliver(batch[:middle])
        self._deliver(batch[middle:])

    def _failed(
        self, reason: str, retry_after: float | None, cause: BaseException | None = None
    ) -> NoReturn:
        """Schedule the next attempt and raise: SinkUnavailable, or SinkFatal once
        ``max_attempts`` failed in a row."""
        delay = self._delays.next(retry_after)
        self._not_before = time.monotonic() + delay
        attempts = self._config.retry.max_attempts
        where = self._config.shown_url
        if attempts is not None and self._delays.failures >= attempts:
            raise SinkFatal(
                f"http sink: {attempts} attempts failed in a row ({reason} from {where})"
            ) from cause
        raise SinkUnavailable(
            f"http sink: {reason} from {where}; next attempt in {delay:.1f} s"
        ) from cause
