"""The replication connection and what rides on it: CopyBoth framing, the WAL read loop, flush
positions and acks, streamed in-progress transactions, standbys and failover slots, probes."""
