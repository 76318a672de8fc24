"""Initial and incremental snapshots."""
