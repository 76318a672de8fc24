"""Count the Python work a piece of code does: function calls and builtin calls, per thread.

Timed figures flake on a shared machine; the number of calls a hot path makes for a fixed input
does not. :class:`CallCounter` counts, with ``sys.setprofile``, every Python function call
(a generator's resumption counts as a call, as in ``cProfile``) and every call of a builtin
(a C function or method: ``len``, ``dict.get``, the native encoder's methods) made on the
current thread between :meth:`CallCounter.start` and :meth:`CallCounter.stop`, and on every
thread started while it watches whose name has one of the given prefixes (the snapshot's
readers), from that thread's start.

A count is only as steady as the process it runs in: run it in a fresh interpreter (first
imports and warmed caches then cost the same every run) with the garbage collector off (a
collection's finalizers run when everything else alive in the process says) and logging fixed
(:func:`steady_process`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import sysconfig
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import structlog

ROOT = str(Path(__file__).resolve().parents[2]) + "/"
STDLIB = sysconfig.get_paths()["stdlib"] + "/"
#: How many of the most called functions a result keeps, to say where the calls go.
TOP = 25


@dataclass
class Work:
    """What one measured run did: ``rows`` units of work, and the calls it made for them."""

    rows: int
    calls: Counter[str] = field(default_factory=Counter)
    builtins: Counter[str] = field(default_factory=Counter)

    @property
    def calls_per_row(self) -> float:
        return sum(self.calls.values()) / self.rows

    @property
    def builtins_per_row(self) -> float:
        return sum(self.builtins.values()) / self.rows

    def to_json(self) -> dict[str, Any]:
        """The totals and the most called functions (the full counts are too long to keep)."""
        return {
            "rows": self.rows,
            "python_calls": sum(self.calls.values()),
            "builtin_calls": sum(self.builtins.values()),
            "python_calls_per_row": round(self.calls_per_row, 3),
            "builtin_calls_per_row": round(self.builtins_per_row, 3),
            "top_python": self.calls.most_common(TOP),
            "top_builtin": self.builtins.most_common(TOP),
        }


class _ThreadCount:
    """One thread's counts; its bound :meth:`event` is that thread's profile function, so no
    two threads ever update the same counter (a lost increment would make counts vary)."""

    def __init__(self, skip: frozenset[CodeType]) -> None:
        self.calls: dict[CodeType, int] = {}
        self.builtins: dict[str, int] = {}
        self._skip = skip
        self._paused: FrameType | None = None
        self.on = True

    def event(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on:
            return
        if self._paused is not None:  # inside a skipped call: nothing counts until it returns
            if event == "return" and frame is self._paused:
                self._paused = None
            return
        if event == "call":
            code = frame.f_code
            if code in self._skip:
                self._paused = frame
                return
            self.calls[code] = self.calls.get(code, 0) + 1
        elif event == "c_call":
            name = _builtin_name(arg)
            self.builtins[name] = self.builtins.get(name, 0) + 1

    def mark(self) -> tuple[dict[CodeType, int], dict[str, int]]:
        return dict(self.calls), dict(self.builtins)

    def rollback(self, mark: tuple[dict[CodeType, int], dict[str, int]]) -> None:
        self.calls, self.builtins = dict(mark[0]), dict(mark[1])


class CallCounter:
    """Counts calls on this thread while started, and on the watched threads it sees start.

    Args:
        skip: functions whose calls, and everything they call, are not counted (work done once
            per run inside the measured loop, such as opening the stream when a snapshot ends).
        threads: name prefixes of the threads to count from their start (``()``: none).
    """

    def __init__(
        self, skip: Iterable[Callable[..., Any]] = (), threads: tuple[str, ...] = ()
    ) -> None:
        self._skip = frozenset(_code(f) for f in skip)
        self._prefixes = threads
        self._main = _ThreadCount(self._skip)
        self._main.on = False
        self._threads: list[_ThreadCount] = []

    def __enter__(self) -> CallCounter:
        if self._prefixes:
            threading.setprofile(self._thread_started)
        sys.setprofile(self._main.event)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)
        for count in self._threads:  # a watched thread still alive counts no more
            count.on = False

    def start(self) -> None:
        """Count this thread's calls from here on."""
        self._main.on = True

    def stop(self) -> None:
        self._main.on = False

    @property
    def counting(self) -> bool:
        return self._main.on

    def mark(self) -> tuple[dict[CodeType, int], dict[str, int]]:
        """This thread's counts now, for :meth:`rollback`."""
        return self._main.mark()

    def rollback(self, mark: tuple[dict[CodeType, int], dict[str, int]]) -> None:
        """Forget this thread's calls since ``mark`` (an idle poll's: how many a wait takes
        depends on the clock, not on the rows)."""
        self._main.rollback(mark)

    def work(self, rows: int) -> Work:
        """Every counted call, this thread's and the watched threads', for ``rows`` rows."""
        work = Work(rows)
        for count in (self._main, *self._threads):
            work.calls.update({_code_name(c): n for c, n in count.calls.items()})
            work.builtins.update(count.builtins)
        return work

    def _thread_started(self, frame: FrameType, event: str, arg: Any) -> None:
        # threading installs this hook on every thread it starts, before the thread's run().
        if not threading.current_thread().name.startswith(self._prefixes):
            sys.setprofile(None)
            return
        count = _ThreadCount(self._skip)
        self._threads.append(count)  # list.append is atomic: threads may start together
        sys.setprofile(count.event)
        count.event(frame, event, arg)


@contextlib.contextmanager
def steady_process() -> Iterator[None]:
    """No garbage collection, and warnings-only logging that drops what it is given, while
    counting: both would otherwise add calls that depend on the process, not on the rows."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    previous = structlog.get_config()
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.configure(**previous)
        if was_enabled:
            gc.enable()


def _code(function: Callable[..., Any]) -> CodeType:
    code: CodeType = function.__code__
    return code


def _code_name(code: CodeType) -> str:
    """``cdc/envelope/encode.py:120(batch_records)``: relative to the checkout, or to
    site-packages."""
    path = code.co_filename
    for prefix, shown in ((ROOT, ""), (STDLIB, "stdlib/")):
        if path.startswith(prefix):
            path = shown + path[len(prefix) :]
            break
    path = path.rsplit("site-packages/", 1)[-1]
    return f"{path}:{code.co_firstlineno}({code.co_qualname})"


def _builtin_name(function: Any) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or repr(function)
    return f"{module}.{name}" if module and module != "builtins" else str(name)
