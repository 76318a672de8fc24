"""The shipped test kit: fault-injecting fakes for runtime tests, a reference in-memory sink,
and the sink conformance kit (cdc.testing.conformance)."""

from cdc.testing.fakes import FlakySink, ScriptedSource, make_event
from cdc.testing.memory_sink import MemorySink, MemoryStore

__all__ = ["FlakySink", "MemorySink", "MemoryStore", "ScriptedSource", "make_event"]
