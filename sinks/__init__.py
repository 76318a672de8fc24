"""Sinks that keep derived stores in sync with the topics."""
