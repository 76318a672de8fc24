"""The pipeline runtime: a source task that appends to the log and then acks, one task per sink
that writes, flushes and commits, and what runs beside them (control, heartbeats, compaction)."""
