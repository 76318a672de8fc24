"""The shipped test kit: fault-injecting fakes for runtime tests, a reference in-memory sink,
the sink conformance kit (cdc.testing.conformance, built on pytest: import it from there) and
the transform conformance kit (:class:`TransformConformance`, cdc.testing.transforms), which a
third-party ``cdc.transforms`` plugin's tests subclass."""

from cdc.testing.fakes import FlakySink, ScriptedSource, make_event
from cdc.testing.memory_sink import MemorySink, MemoryStore
from cdc.testing.transforms import TransformConformance

__all__ = [
    "FlakySink",
    "MemorySink",
    "MemoryStore",
    "ScriptedSource",
    "TransformConformance",
    "make_event",
]
