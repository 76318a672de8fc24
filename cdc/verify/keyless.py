"""``cdc verify`` on a table keyed by every column for want of a key.

A PostgreSQL table with no primary key and ``REPLICA IDENTITY FULL`` (the fix ``cdc doctor``
gives for a keyless table) has its records keyed by every column. What that gives, and what
it cannot:

- every distinct row reaches the sinks, and every change to it: a sink holds the source's
  *set* of rows;
- identical rows share one key, so a sink holds them as one row; and a DELETE of one copy
  (``WHERE ctid = ...``) is a delete of that key, which removes the sink's only row while the
  source keeps the other copy. Nothing in the change stream tells the copies apart.

So verify compares such a table as a set. Equal sets are ``ok`` (a note counts the source's
duplicates, held once in the sink). A difference is NOT VERIFIABLE, with that reason and the
keys listed: it may be the collapse above, which no sink can avoid, rather than a defect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from cdc.contracts import plugins
from cdc.verify.comparison import RowReader, TableComparison

Judge = Callable[[TableComparison], TableComparison]

KEYLESS = (
    "keyless table (no primary key; REPLICA IDENTITY FULL keys its records by every column): "
    "identical rows collapse into one in a sink, and deleting one copy deletes the sink's row"
)


def keyless_guard(pipeline: Any, table: str, read_source: RowReader) -> tuple[RowReader, Judge]:
    """The source's reader and how to judge the comparison of output table ``table``: as it
    is, or, for a table keyed by every column, as a set (:func:`judged`)."""
    if not keyed_by_value(pipeline, table):
        return read_source, _as_compared
    counter = _Counted(read_source)
    return counter, lambda result: judged(result, counter.last)


def keyed_by_value(pipeline: Any, table: str) -> bool:
    """Whether a source table routed to ``table`` is keyed by every column (the source
    plugin says, through its optional ``keyed_by_value``)."""
    plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
    probe = getattr(plugin, "keyed_by_value", None)
    if probe is None:
        return False
    names = [name.partition(".") for name in pipeline.routed_from(table)]
    return any(probe(pipeline.source, schema, name) for schema, _, name in names)


def judged(result: TableComparison, rows_read: int) -> TableComparison:
    """A keyless table's comparison: equal sets stay ``ok`` (with a note of the source's
    duplicates); a difference is NOT VERIFIABLE, its keys kept for the reader."""
    duplicates = rows_read - result.source_count
    if result.state == "ok" and duplicates > 0:
        result.note = (
            f"{duplicates} source row{'' if duplicates == 1 else 's'} duplicate another row "
            f"and {'is' if duplicates == 1 else 'are'} held once in the sink ({KEYLESS})"
        )
    elif result.state == "different":
        result.unverifiable = f"{KEYLESS}: the rows below may differ for that reason"
    return result


def _as_compared(result: TableComparison) -> TableComparison:
    return result


class _Counted:
    """A reader that counts the rows of its last read (the source's, duplicates included:
    the comparison keeps one row per key)."""

    def __init__(self, read: RowReader) -> None:
        self._read = read
        self.last = 0

    def __call__(self) -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
        return self._rows()

    def _rows(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        self.last = 0
        for row in self._read():
            self.last += 1
            yield row
