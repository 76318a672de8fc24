"""The operations a table's records leave out, for an assembler that writes records itself.

The runtime leaves out of an event batch the operations a table's ``ops`` does not capture and
those the envelope's ``skipped.operations`` names (``SourceTask._captured``,
:func:`cdc.envelope.encode.batch_records`). A source writing its records itself
(:attr:`cdc.contracts.source.SourceContext.write_records`) must leave out the same ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from cdc.envelope.options import EnvelopeOptions
from connectors.postgres.publication.filters import TableFilter

#: The operations a stream writes (``r`` is a snapshot's).
STREAMED = frozenset("cudt")


class Unwritten:
    """Which operations of which table are not written; false when every one is.

    Args:
        filters: each table's entry (``schema.table``), whose ``ops`` list what it captures.
        options: the envelope's options (``skipped.operations``).
    """

    __slots__ = ("_by_table", "_skipped")

    def __init__(self, filters: Mapping[str, TableFilter], options: EnvelopeOptions) -> None:
        self._skipped = frozenset(op.value for op in options.skipped)
        self._by_table = {
            name: self._skipped | (STREAMED - set(f.entry.ops))
            for name, f in filters.items()
            if f.entry.ops
        }

    def __bool__(self) -> bool:
        return bool(self._skipped or self._by_table)

    def writes(self, table: str, op: str) -> bool:
        """Whether changes of ``op`` to ``table`` (``schema.table``) are written."""
        return op not in self._by_table.get(table, self._skipped)
