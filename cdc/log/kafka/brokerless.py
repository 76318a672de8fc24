"""Noticing a librdkafka client that knows no broker any more.

librdkafka drops every broker a metadata answer leaves out, and a broker that shuts down
cleanly answers metadata without itself. A client of a one-broker cluster is then left with no
broker: it sends nothing, so it reports no error, and it never goes back to
``bootstrap.servers`` (confluentinc/librdkafka#5301, open at 2.16). Nothing in the client's
API says so, but its statistics do: :class:`BrokerlessWatch` reads them (``stats_cb``) and tells
the owner, which replaces the client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson

from cdc.contracts.errors import LogError
from cdc.support.logging import get_logger

#: librdkafka's statistics every this many milliseconds (parsing one costs some 50 µs).
STATS_INTERVAL_MS = 5_000
#: Brokerless for this long (two reports in a row): the client is stuck, not re-bootstrapping
#: (which drops the learned brokers and adds the bootstrap ones in one step).
STUCK_AFTER_S = 8.0
#: Where a broker came from; "logical" ones (the group coordinator's handle) borrow the address
#: of a real one and cannot reach the cluster by themselves.
_REAL_SOURCES = frozenset({"configured", "learned"})

_logger = get_logger(component="kafka_log")
_Client = TypeVar("_Client")


class BrokerlessWatch:
    """Tracks whether the client's latest statistics named any real broker."""

    def __init__(self) -> None:
        self._brokerless_since: float | None = None

    def settings(self) -> dict[str, Any]:
        """The client settings that deliver its statistics here."""
        return {"statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": self.on_stats}

    def on_stats(self, report: str) -> None:
        """librdkafka's ``stats_cb``; it must not raise (it runs inside librdkafka's calls)."""
        try:
            brokers = orjson.loads(report).get("brokers") or {}
            known = any(b.get("source") in _REAL_SOURCES for b in brokers.values())
        except (ValueError, AttributeError):
            return
        if known:
            self._brokerless_since = None
        elif self._brokerless_since is None:
            self._brokerless_since = time.monotonic()

    def stuck(self) -> bool:
        """The client has known no broker for :data:`STUCK_AFTER_S`."""
        since = self._brokerless_since
        return since is not None and time.monotonic() - since >= STUCK_AFTER_S

    def reset(self) -> None:
        """A new client replaces the stuck one."""
        self._brokerless_since = None


class RenewedClient(Generic[_Client]):
    """A long-lived client (admin, partition reader) that is replaced once it knows no broker.

    Each :meth:`current` serves the client's callbacks (its statistics among them) and, if it
    has been brokerless for :data:`STUCK_AFTER_S`, makes a new one, which bootstraps again.

    Args:
        make: builds a client from settings.
        config: the client's settings (the statistics callback is added).
        what: the client's role, for the log.
    """

    def __init__(
        self, make: Callable[[dict[str, Any]], _Client], config: dict[str, Any], what: str
    ) -> None:
        self._watch = BrokerlessWatch()
        self._make = make
        self._config = {**config, **self._watch.settings()}
        self._what = what
        self._client: _Client | None = make(self._config)
        self._lock = threading.Lock()  # threads share an admin client: one renewal, not two

    def current(self) -> _Client:
        """The client, renewed first if it knows no broker.

        Raises:
            LogError: the client is closed.
        """
        with self._lock:
            if self._client is None:
                raise LogError(f"kafka log: the {self._what} client is closed")
            served = self._client.poll(0)  # type: ignore[attr-defined]  # serves stats_cb
            # An admin client returns a count; a group-less consumer between reads, at most
            # an error event (it is assigned nothing), which is logged rather than dropped.
            error = getattr(served, "error", None)
            if error is not None and error() is not None:
                _logger.warning("kafka.client_error", client=self._what, error=error().name())
            if self._watch.stuck():
                self._renew()
            return self._client

    def close(self) -> None:
        """Close the client and let it go; a failure is logged.

        An admin client has no ``close()``: its handle, with its librdkafka threads, is
        destroyed when the last reference to it goes. Dropped here, that is now (a caller still
        in a request holds its own reference until it returns), not whenever the garbage
        collector frees the log that owns it: a library caller, such as a test process building
        ``cdc status`` reports, otherwise keeps a live client and its threads per report.
        """
        with self._lock:
            client, self._client = self._client, None
            close = getattr(client, "close", None)
            if close is not None:
                _close_quietly(close)
        del client  # the last reference (an admin client): its handle is destroyed here

    def _renew(self) -> None:
        _logger.warning("kafka.client_renewed", client=self._what, reason="it knows no broker")
        old, self._client = self._client, self._make(self._config)
        self._watch.reset()
        close = getattr(old, "close", None)
        if close is not None:  # a consumer: leaving waits on brokers it cannot reach
            threading.Thread(target=_close_quietly, args=(close,), daemon=True).start()


def _close_quietly(close: Callable[[], Any]) -> None:
    try:
        close()
    except Exception as exc:  # a client that cannot close is dropped all the same
        _logger.warning("kafka.client_close_failed", error=str(exc))
