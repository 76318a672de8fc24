"""What a comparison finds, now in :mod:`cdc.verify.comparison`; re-exported for the callers of
its former place."""

from cdc.verify.comparison import RowDecoding, RowReader, TableComparison

__all__ = ["RowDecoding", "RowReader", "TableComparison"]
