"""What a plugin author implements and uses: the source and sink protocols, the change event,
positions, table schemas, errors, preflight checks, plugin lookup, the stored snapshot progress."""
