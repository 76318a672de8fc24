"""The shipped test kit, for this project's tests and a third-party plugin's alike: fakes that
inject faults, a reference in-memory sink, the sink and transform conformance kits, a wait.

The sink conformance kit is :mod:`cdc.testing.conformance` (built on pytest: import it from
there); the transform conformance kit, :class:`TransformConformance`
(:mod:`cdc.testing.transforms`), is what a third-party ``cdc.transforms`` plugin's tests
subclass; a test waits for something one way, :func:`wait_until`, on a :class:`ManualClock`
where real time need not pass."""

from cdc.support.wait import WaitTimeout, wait_until
from cdc.testing.clock import ManualClock
from cdc.testing.fakes import FlakySink, ScriptedSource, make_event
from cdc.testing.memory_sink import MemorySink, MemoryStore
from cdc.testing.transforms import TransformConformance

__all__ = [
    "FlakySink",
    "ManualClock",
    "MemorySink",
    "MemoryStore",
    "ScriptedSource",
    "TransformConformance",
    "WaitTimeout",
    "make_event",
    "wait_until",
]
