"""Source connectors, each a ``cdc.sources`` plugin: PostgreSQL (logical replication with
pgoutput), MongoDB (change streams), and a deterministic generator for demos and tests."""
