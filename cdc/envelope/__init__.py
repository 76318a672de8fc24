"""The write side: change events become Debezium's record bytes (envelope, options, row JSON, the
per-table record template, Connect schemas), the source position travelling beside the value."""
