"""The replication connection and what rides on it: CopyBoth framing, the WAL read loop (the hot
path), flush positions and acks, streamed transactions, standbys, the slot's probe, versions."""
