"""``cdc verify``: each table compared between the source and every sink (:mod:`.compare`),
keyless tables, lag, the sources' readers and the report."""
