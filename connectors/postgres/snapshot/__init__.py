"""PostgreSQL snapshots: the initial one over a snapshot exported at the slot's consistent point,
and incremental re-snapshots read between DBLog watermarks while the stream runs.

The source-neutral parts (chunk state and planning, the watermark window, progress, modes) are
the :mod:`snapshots` kit; what is here talks to PostgreSQL.
"""
