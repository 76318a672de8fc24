"""Stage a table's changes in bulk: one JSON document, parsed and cast by DuckDB.

The batch is encoded once with orjson and handed to DuckDB as a single parameter; ``from_json``
splits it into columns of text (or JSON) and each column is cast to its type in SQL. This keeps
Python out of the per-value work and needs neither pandas nor pyarrow. A value DuckDB cannot
cast fails the whole statement, so :func:`find_bad_value` re-runs the casts with ``TRY`` to name
the record and column to blame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from cdc.errors import RecordError
from sinks.duckdb.catalog import POSITION, SEQUENCE, ColumnInfo, TableState, quote
from sinks.duckdb.plan import Change
from sinks.duckdb.types import Conversion, conversion, document_key

STAGE: Final = "__cdc_stage"
OP: Final = "__cdc_op"
TS: Final = "__cdc_ts"
INDEX: Final = "__cdc_i"


@dataclass(frozen=True, slots=True)
class Staged:
    """A table's batch as DuckDB will read it."""

    payload: str
    spec: str
    columns: list[ColumnInfo]
    conversions: list[Conversion]
    changes: list[Change]


class StageFailed(Exception):
    """DuckDB refused to cast the staged batch; diagnose after the rollback."""

    def __init__(self, staged: Staged, cause: Exception) -> None:
        super().__init__(str(cause))
        self.staged = staged
        self.cause = cause


def encode(state: TableState, changes: list[Change]) -> Staged:
    """The changes of one table as one JSON document, checked against the table's columns.

    Raises:
        RecordError: a change with a column the table does not know, or a value that a
            Python-side conversion refuses.
    """
    columns = state.columns
    conversions = [conversion(c.duck_type) for c in columns]
    spec: dict[str, str] = {"i": "BIGINT", "p": "HUGEINT", "s": "BIGINT", "o": "VARCHAR"}
    spec["t"] = "BIGINT"
    spec.update({f"c{n}": conv.stage for n, conv in enumerate(conversions)})
    extract = _document_values if state.layout == "document" else _typed_values(state)
    fix = [(n, conv.python) for n, conv in enumerate(conversions) if conv.python is not None]
    rows = []
    for index, change in enumerate(changes):
        values = extract(change)
        for n, convert in fix:
            if values[n] is not None:
                values[n] = convert(values[n])
        row = dict(zip(spec, (index, *change.pos, change.op, change.ts_ms, *values), strict=True))
        rows.append(row)
    payload = orjson.dumps(rows).decode()
    return Staged(payload, orjson.dumps([spec]).decode(), columns, conversions, changes)


def _typed_values(state: TableState) -> Any:
    names = [c.name for c in state.columns]
    known = frozenset(names)
    keys = [c.name for c in state.keys]
    where = f"{state.schema}.{state.table}"

    def values(change: Change) -> list[Any]:
        row = change.row
        if not known.issuperset(row):
            unknown = sorted(set(row) - known)
            raise RecordError(
                f"{where}: columns {unknown} are not in the published schema", change.record
            )
        if change.op == "d":
            row = {**row, **{k: change.key[k] for k in keys if k in change.key}}
        return [row.get(name) for name in names]

    return values


def _document_values(change: Change) -> list[Any]:
    # The key as canonical JSON (sorted names), so equal keys are equal text in DuckDB.
    key = orjson.Fragment(document_key(change.key))
    return [key, None if change.op == "d" else change.row]


def stage(con: Any, staged: Staged) -> None:
    """Create temp table ``__cdc_stage`` with typed columns from ``staged``.

    Raises:
        StageFailed: a value could not be cast (the transaction is now aborted).
    """
    casts = ", ".join(
        f"{conv.expr.format(c=f'c{n}')} AS {quote(col.name)}"
        for n, (col, conv) in enumerate(zip(staged.columns, staged.conversions, strict=True))
    )
    sql = (
        f"CREATE OR REPLACE TEMP TABLE {STAGE} AS SELECT i AS {INDEX}, p AS {POSITION}, "
        f"s AS {SEQUENCE}, o AS {OP}, t AS {TS}, {casts} FROM {_source(staged)}"
    )
    try:
        con.execute(sql, [staged.payload])
    except Exception as exc:
        raise StageFailed(staged, exc) from exc


def _source(staged: Staged) -> str:
    spec = staged.spec.replace("'", "''")
    return f"(SELECT unnest(from_json(?, '{spec}'), recursive := true))"


def find_bad_value(con: Any, failed: StageFailed) -> RecordError | None:
    """The record and column whose value DuckDB cannot cast, as a ``RecordError``."""
    staged = failed.staged
    checks = [
        f"CASE WHEN c{n} IS NOT NULL AND TRY({conv.expr.format(c=f'c{n}')}) IS NULL THEN {n} END"
        for n, conv in enumerate(staged.conversions)
    ]
    sql = (
        f"SELECT i, coalesce({', '.join(checks)}) AS bad FROM {_source(staged)} "
        "WHERE bad IS NOT NULL ORDER BY i LIMIT 1"
    )
    found = con.execute(sql, [staged.payload]).fetchone()
    if found is None:
        return None
    change = staged.changes[int(found[0])]
    column = staged.columns[int(found[1])]
    value = _raw_value(change, column)
    reason = (
        f"column {column.name} ({column.source_type or 'json'}): value {value!r} cannot be "
        f"stored as DuckDB {column.duck_type}: {str(failed.cause).splitlines()[0]}"
    )
    return RecordError(reason, change.record)


def _raw_value(change: Change, column: ColumnInfo) -> Any:
    value = change.row.get(column.name) if isinstance(change.row, dict) else None
    text = repr(value)
    return value if len(text) <= 200 else text[:200] + "..."
