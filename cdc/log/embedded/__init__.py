"""The default log: SQLite (WAL mode) in the pipeline's state directory, one file and no server
to run, compacted in place.

``log`` is the :class:`~cdc.log.base.Log` itself; ``store`` the schema and stored offsets,
``txn`` a transaction, ``consumer`` a consumer group's reads, ``shared`` the parts the log hands
its transactions and consumers (connections, topic catalog, append signal), ``compaction`` the
cleaner, ``heads`` and ``frames`` the bytes values share, stored once, ``bulk`` the key index
dropped while a snapshot loads, and ``appender`` the optional native bulk insert (Rust,
``native/``), which says which implementation runs and why.
"""

from cdc.log.embedded.log import EmbeddedLog

__all__ = ["EmbeddedLog"]
