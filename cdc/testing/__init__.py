"""The shipped test kit: fault-injecting fakes for runtime tests, a reference in-memory sink,
the sink conformance kit (cdc.testing.conformance, built on pytest: import it from there) and
the transform conformance kit (:class:`TransformConformance`, cdc.testing.transforms), which a
third-party ``cdc.transforms`` plugin's tests subclass, and the one way a test waits for
something (:func:`wait_until`, on a :class:`ManualClock` where real time need not pass)."""

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
