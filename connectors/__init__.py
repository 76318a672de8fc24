"""Source connectors: PostgreSQL (pgoutput), MongoDB (change streams), and a generator."""
