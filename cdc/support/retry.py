"""Retry decisions, in one place.

Every error the runtime meets is classified here: retriable errors are tried again with
exponential backoff, skippable ones go to the pipeline's bad-record policy, and anything else
stops the pipeline with its message.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from cdc.contracts.errors import Fatal, Retriable, Skippable
from cdc.support.logging import Logger

T = TypeVar("T")


class Decision(Enum):
    RETRY = "retry"
    SKIP = "skip"
    FAIL = "fail"


def classify(exc: BaseException) -> Decision:
    """What to do about ``exc``; unknown errors are fatal, so nothing fails silently."""
    if isinstance(exc, Fatal):
        return Decision.FAIL
    if isinstance(exc, Retriable):
        return Decision.RETRY
    if isinstance(exc, Skippable):
        return Decision.SKIP
    return Decision.FAIL


@dataclass
class Backoff:
    """Exponential backoff with jitter (``jitter``: the delay varies by up to that fraction),
    reset after a success."""

    initial_s: float = 0.2
    maximum_s: float = 10.0
    attempt: int = 0
    jitter: float = 0.2

    @classmethod
    def fixed(cls, delay_s: float) -> Backoff:
        """The same delay before every retry, no jitter (a short wait for a moment to pass)."""
        return cls(initial_s=delay_s, maximum_s=delay_s, jitter=0.0)

    def next_delay(self) -> float:
        # The exponent stops growing once the delay is at its maximum: ``2.0 ** 1024`` overflows,
        # which would crash a loop that retried through a long outage (about 3 h at 10 s).
        delay = min(self.maximum_s, self.initial_s * (2.0 ** min(self.attempt, 64)))
        self.attempt += 1
        if not self.jitter:
            return delay
        return delay * random.uniform(1.0 - self.jitter, 1.0 + self.jitter)

    def reset(self) -> None:
        self.attempt = 0


class Stopped(Exception):
    """The pipeline is stopping; raised out of a retry loop."""


def retry_until_stopped(
    operation: Callable[[], T],
    stop: threading.Event,
    logger: Logger,
    event: str,
    backoff: Backoff | None = None,
    attempts: int | None = None,
) -> T:
    """Run ``operation`` until it succeeds, retrying retriable errors with backoff.

    Args:
        attempts: most tries in all (``None``: no limit), for work that may give up without
            stopping the pipeline (an online snapshot request).

    Raises:
        Stopped: when ``stop`` is set while waiting to retry.
        Exception: any error that is not retriable, unchanged; a retriable one after
            ``attempts`` tries.
    """

    def log(exc: Exception, failures: int, delay: float) -> None:
        logger.warning(event, error=str(exc), retry_in_s=round(delay, 2))

    return retry(
        operation, is_retriable, backoff or Backoff(), attempts=attempts, on_retry=log, stop=stop
    )


def is_retriable(exc: Exception) -> bool:
    """Whether :func:`classify` says ``exc`` may heal."""
    return classify(exc) is Decision.RETRY


def retry(
    operation: Callable[[], T],
    retriable: Callable[[Exception], bool],
    backoff: Backoff,
    *,
    attempts: int | None = None,
    within_s: float | None = None,
    on_retry: Callable[[Exception, int, float], None] | None = None,
    stop: threading.Event | None = None,
) -> T:
    """Run ``operation`` until it succeeds, waiting ``backoff`` before each retry: the one
    retry loop, for the runtime's errors (:func:`retry_until_stopped`) and for a driver's.

    Args:
        retriable: which errors are tried again; any other is raised at once, unchanged, as is
            the last one after ``attempts`` tries or once ``within_s`` has passed (``None``:
            no limit).
        on_retry: told ``(error, failures so far, delay)`` before each wait.
        stop: waited on instead of sleeping; raises :class:`Stopped` when set in a wait.
    """
    deadline = None if within_s is None else time.monotonic() + within_s
    failures = 0
    while True:
        try:
            result = operation()
        except Exception as exc:
            failures += 1
            if not retriable(exc) or failures == attempts:
                raise
            if deadline is not None and time.monotonic() > deadline:
                raise
            delay = backoff.next_delay()
            if on_retry is not None:
                on_retry(exc, failures, delay)
            _wait(delay, stop, exc)
            continue
        backoff.reset()
        return result


def _wait(delay: float, stop: threading.Event | None, exc: Exception) -> None:
    if stop is None:
        time.sleep(delay)
    elif stop.wait(delay):
        raise Stopped() from exc
