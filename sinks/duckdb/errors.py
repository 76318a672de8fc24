"""What a DuckDB sink says when it cannot apply a record: the table, the column, the value (unless
the configuration masks the column) and the fix, in one sentence an operator can act on.

The runner adds the sink's name and the ``bad_records`` policy to a record's error
(:class:`cdc.runtime.sink_task.SinkRecordStop`); a :class:`~cdc.contracts.errors.SinkFatal` built
here names the sink itself. DuckDB's own messages quote the values they refused (and a batch's
staging document, which holds every value of the batch), so they are cut before any quote.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any, Final

import orjson

from cdc.contracts.errors import RecordError, SinkError, SinkFatal
from sinks.duckdb.catalog import ColumnInfo, TableState
from sinks.duckdb.connection import first_line, translate

_LONGEST: Final = 200
# DuckDB quotes data after these: a value ("...", '...') or the staged document ("Input: ...").
_QUOTED: Final = re.compile(r"""\s*(?:Input:|["']).*""", re.DOTALL)


def shown(value: Any, hidden: bool) -> str:
    """``value`` as an error prints it: ``repr``, cut at 200 characters; never a masked one."""
    if hidden:
        return "(not shown: the column is masked)"
    text = repr(value)
    return text if len(text) <= _LONGEST else text[:_LONGEST] + "..."


def duckdb_reason(exc: BaseException) -> str:
    """DuckDB's message, first line, cut before the data it quotes."""
    return _unquoted(first_line(exc)) or type(exc).__name__


def _unquoted(text: str) -> str:
    return _QUOTED.sub("", text).rstrip(" :,")


def bad_value(
    state: TableState,
    column: ColumnInfo,
    value: Any,
    hidden: Collection[str],
    why: str,
    record: Any,
) -> RecordError:
    """The record error for ``value`` of ``column``, which DuckDB cannot take; ``why`` says
    what refused it (no data of its own)."""
    table = f"{state.schema}.{state.table}"
    key = getattr(record, "key", None)
    masked_key = any(c.name in hidden for c in state.keys)
    where = "" if key is None or masked_key else f", key {orjson.dumps(key).decode()}"
    reason = (
        f"table {table}, column {column.name} ({column.source_type or 'json'}){where}: value "
        f"{shown(value, column.name in hidden)} cannot be stored as DuckDB {column.duck_type} "
        f"({_unquoted(why)}). Fix: {_fix(column, table)}"
    )
    return RecordError(reason, record)


def _fix(column: ColumnInfo, table: str) -> str:
    skip = "set bad_records: dead_letter to skip such records to the dead-letter topic"
    if column.duck_type.startswith("DECIMAL"):
        return (
            f"DuckDB's {column.duck_type} holds no NaN or Infinity and no more digits than "
            f"declared: {skip}, or declare the source column numeric without precision (kept "
            f"as exact text) and rebuild the table: cdc sink FILE SINK --reset-table {table}"
        )
    return (
        f"{skip}, then correct the row in the source: the value is no "
        f"{column.source_type or 'json document'} as the pipeline's envelope settings write it, "
        f"or one DuckDB's {column.duck_type} cannot hold"
    )


def staging_failed(exc: BaseException, tables: Collection[str]) -> SinkError:
    """A staging failure no value was found to blame for: DuckDB's reason, without its data."""
    doing = f"applying a batch of {', '.join(sorted(tables)) or 'no table'}"
    return translate(exc, doing, duckdb_reason(exc))


def named(exc: SinkFatal, sink: str) -> SinkFatal:
    """``exc`` naming ``sink``, and ``sink`` in the ``cdc sink`` command of its fix."""
    text = (
        str(exc)
        .removeprefix("DuckDB sink: ")
        .replace("cdc sink FILE SINK ", f"cdc sink FILE {sink} ")
    )
    return SinkFatal(f"DuckDB sink {sink}: {text}")
