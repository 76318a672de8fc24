"""The source side of a comparison, now in :mod:`cdc.verify.sources`; re-exported for the
callers of its former place."""

from cdc.verify.sources import VERIFY_CONNECTOR, source_reader, unverifiable

__all__ = ["VERIFY_CONNECTOR", "source_reader", "unverifiable"]
