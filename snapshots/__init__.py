"""The source-neutral snapshot kit every connector uses: chunk state and planning, the DBLog
watermark window, progress reporting and snapshot modes. It imports only :mod:`cdc`; the readers
that talk to a database live in the connector (:mod:`connectors.postgres.snapshot`)."""
