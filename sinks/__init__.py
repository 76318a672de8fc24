"""Sinks, each a ``cdc.sinks`` plugin in a folder of its own (duckdb, postgres, redis, search,
jsonl), and what they share: records as keyed changes (``keyed``), stored offsets (``offsets``)."""
