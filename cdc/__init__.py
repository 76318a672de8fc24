"""cdc: change data capture from PostgreSQL and MongoDB into compacted topics and sinks."""

__version__ = "0.1.0"
