"""The write side: change events to Debezium's record bytes (the envelope, its options, row
JSON, the per-table record template, Connect schemas for ``schemas.enable``)."""
