"""The shipped test kit: fault-injecting fakes for runtime tests and (later) sink conformance."""

from cdc.testing.fakes import FlakySink, ScriptedSource, make_event

__all__ = ["FlakySink", "ScriptedSource", "make_event"]
