"""``cdc verify``: do the source and each sink hold the same rows? Lagging sinks are reported as
such; the others are compared table by table (count, checksum, then key by key) and reported."""
