"""Retry decisions, in one place.

Every error the runtime meets is classified here: retriable errors are tried again with
exponential backoff, skippable ones go to the pipeline's bad-record policy, and anything else
stops the pipeline with its message.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from cdc.errors import Fatal, Retriable, Skippable
from cdc.logging import Logger

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
    """Exponential backoff with jitter, reset after a success."""

    initial_s: float = 0.2
    maximum_s: float = 10.0
    attempt: int = 0

    def next_delay(self) -> float:
        delay = min(self.maximum_s, self.initial_s * (2.0**self.attempt))
        self.attempt += 1
        return delay * random.uniform(0.8, 1.2)

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
    backoff = backoff or Backoff()
    failures = 0
    while True:
        try:
            result = operation()
        except Exception as exc:
            failures += 1
            if classify(exc) is not Decision.RETRY or failures == attempts:
                raise
            delay = backoff.next_delay()
            logger.warning(event, error=str(exc), retry_in_s=round(delay, 2))
            if stop.wait(delay):
                raise Stopped() from exc
            continue
        backoff.reset()
        return result
