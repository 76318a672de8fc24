"""Sinks, each a ``cdc.sinks`` plugin in a folder of its own (duckdb, redis, search, jsonl), and
what they share: records as keyed changes (``keyed``), offsets kept with the data (``offsets``)."""
