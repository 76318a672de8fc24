"""``cdc doctor`` for PostgreSQL: what the server, the role, the slot, the tables and their
filters must be for a pipeline to start, each check ok or with its exact fix."""
