"""Waiting for a condition, the one way: poll a predicate until it holds or the time is up.

Product loops (a slot to be released, a topic to become visible, a sink reset to be applied)
and the tests' waits all use :func:`wait_until`, so each states only what it waits for, for how
long and how often it looks; the clock is injectable, so a unit test runs a long wait on a
manual clock in no time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from cdc.support.clock import SYSTEM_CLOCK, Clock

T = TypeVar("T")

_SHOWN_CHARS = 200  # of the last value's repr in the message: enough to see, not a whole table


class WaitTimeout(TimeoutError):
    """What was awaited did not come in time.

    Attributes:
        what: what was awaited, as the waiter described it.
        timeout_s: how long it was awaited.
        last: the predicate's last (falsy) value; ``None`` if its last call raised.
        error: the exception the predicate's last call raised (one of the ``ignore``d kinds),
            else ``None``; also the ``__cause__``.
    """

    def __init__(self, what: str, timeout_s: float, last: object, error: Exception | None):
        seen = f"last error: {_clip(repr(error))}" if error else f"last value: {_clip(repr(last))}"
        super().__init__(f"timed out after {timeout_s:g}s waiting for {what} ({seen})")
        self.what = what
        self.timeout_s = timeout_s
        self.last = last
        self.error = error


def wait_until(
    predicate: Callable[[], T | None],
    timeout_s: float,
    interval_s: float = 0.05,
    *,
    clock: Clock = SYSTEM_CLOCK,
    describe: str | Callable[[], str] | None = None,
    ignore: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``predicate`` every ``interval_s`` until it returns a truthy value, and return it.

    The predicate is called at least once (also with ``timeout_s`` 0) and once more at the
    deadline, so a condition that holds by then is never reported as timed out.

    Args:
        describe: what is awaited, for the timeout's message; a callable is asked only on
            timeout, so it may report the state reached ("3/8 rows"). Default: the predicate's
            name.
        ignore: exception types that mean "not yet" (a server still starting); any other
            exception from the predicate is raised at once, unchanged.

    Raises:
        WaitTimeout: the predicate was still falsy (or raising an ``ignore``d error) at the
            deadline.
    """
    deadline = clock.monotonic() + timeout_s
    while True:
        last: object = None
        error: Exception | None = None
        try:
            last = value = predicate()
        except ignore as exc:
            error = exc
        else:
            if value:
                return value
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            raise WaitTimeout(_what(describe, predicate), timeout_s, last, error) from error
        clock.sleep(min(interval_s, remaining))


def _what(describe: str | Callable[[], str] | None, predicate: Callable[[], object]) -> str:
    if describe is None:
        return getattr(predicate, "__qualname__", None) or repr(predicate)
    return describe if isinstance(describe, str) else describe()


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."
