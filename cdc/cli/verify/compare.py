"""``cdc verify``'s comparison, now in :mod:`cdc.verify.compare` (the continuous verification of
``cdc run`` shares it); re-exported for the callers of its former place."""

from cdc.verify.compare import UNREADABLE, _row_decoding, compare_table, verify_pipeline

__all__ = ["UNREADABLE", "_row_decoding", "compare_table", "verify_pipeline"]
