"""The embedded log: SQLite in the pipeline's state directory, one file, compacted in place.

``log`` is the :class:`~cdc.log.base.Log` itself; ``store`` the schema and stored offsets,
``txn`` a transaction, ``consumer`` a consumer group's reads, ``compaction`` the cleaner, and
``appender`` the optional native bulk insert (Rust, ``native/``).
"""

from cdc.log.embedded.log import EmbeddedLog

__all__ = ["EmbeddedLog"]
