"""``cdc doctor`` for PostgreSQL: the server, role and slot checks (:mod:`.server`), and the
failover, filter and table checks beside them."""
