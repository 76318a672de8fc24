"""One key's state in an Iceberg table, for ``cdc trace``: its row and the position stored with
it (``_cdc_pos``/``_cdc_seq``); in ``current`` mode a deleted key is a row of its own
(``_cdc_deleted``), read as ``(None, position)``."""

from __future__ import annotations

from typing import Any

from pyiceberg.expressions import And, BooleanExpression, EqualTo

from cdc.contracts.errors import SinkFatal
from sinks.iceberg import tables
from sinks.iceberg.config import IcebergSinkConfig
from sinks.iceberg.sink import open_catalog

KeyState = tuple[dict[str, Any] | None, tuple[int, int] | None]


def read_key(
    config: IcebergSinkConfig,
    schema: str,
    table: str,
    key: dict[str, Any],
    *,
    pipeline: str | None = None,
    any_type: bool = False,
) -> KeyState | None:
    """``(row, (position, sequence))`` of ``key`` (``append`` mode: its newest change row);
    ``None`` when the table holds nothing of it."""
    name = tables.identifier(config.namespace_for(pipeline or ""), (schema, table))
    try:
        found = tables.load(open_catalog(config), name)
        if found is None:
            return None
        rows = found.scan(row_filter=_matching(key)).to_arrow().to_pylist()
    except Exception as exc:  # pyiceberg and SQLAlchemy have no common root
        raise SinkFatal(
            f"Iceberg sink {config.name}: reading a key: {config.scrub(str(exc))}"
        ) from None
    if not rows:
        return None
    newest = max(rows, key=lambda r: (r.get(tables.POS) or 0, r.get(tables.SEQ) or 0))
    position = (int(newest[tables.POS]), int(newest[tables.SEQ]))
    if newest.get(tables.DELETED):
        return None, position
    return {c: v for c, v in newest.items() if not c.startswith("_cdc_")}, position


def _matching(key: dict[str, Any]) -> BooleanExpression:
    # pyiceberg's stubs type EqualTo's literal as a keyword; it takes it positionally too.
    terms: list[BooleanExpression] = [
        EqualTo(column, value)  # type: ignore[call-arg, arg-type]
        for column, value in key.items()
    ]
    expression = terms[0]
    for term in terms[1:]:
        expression = And(expression, term)
    return expression
