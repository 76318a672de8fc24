"""Stage a table's changes in bulk: a JSON list a column, parsed and typed by DuckDB.

The batch goes to DuckDB laid out by column, each column one parameter (``[v, v, ...]``)
encoded with orjson. ``from_json_strict`` parses every column straight into its type and fails
on a value it cannot convert; ``unnest`` turns the columns back into rows. This keeps Python
out of the per-value work and needs neither pandas nor pyarrow. A list a parameter, not one
document of lists (``{"c0": [...], ...}``): DuckDB reads a top-level list about twice as fast
as a list inside a document (measured on DuckDB 2.0: 3.8 ms against 1.6 ms for 5,000
integers), which made staging about a third cheaper. After a failure,
:func:`find_bad_value` re-reads the values as text and tries each cast with ``TRY`` to name
the record and column to blame (:mod:`sinks.duckdb.errors` words it).
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import orjson

from cdc.contracts.errors import RecordError
from cdc.contracts.sink import SinkRecord
from cdc.envelope.options import READABLE, EnvelopeOptions
from sinks.duckdb.catalog import POSITION, SEQUENCE, ColumnInfo, TableState, quote
from sinks.duckdb.errors import bad_value, duckdb_reason
from sinks.duckdb.plan import TableBatch
from sinks.duckdb.types import Conversion, conversion, document_key
from sinks.duckdb.wire import BadWireValue, wire_conversion

OP: Final = "__cdc_op"
TS: Final = "__cdc_ts"
_META_SPEC: Final = {"p": ["HUGEINT"], "s": ["BIGINT"], "o": ["VARCHAR"]}


@dataclass(frozen=True, slots=True)
class Staged:
    """A table's batch as DuckDB will read it.

    Attributes:
        unique: every key occurs once (so SQL need not pick the newest change per key).
        times: commit times are staged (history mode needs them; current state does not).
        hidden: the columns whose values the configuration masks (never printed).
        documents: by column number, the staged values of the columns written into the
            payloads as JSON text unparsed (``json`` under the envelope's text form): text
            that is no JSON spoils the whole staging, and only these can tell which.
    """

    payloads: list[str]
    """The staged columns as JSON lists: ``p, s, o``, ``t`` with ``times``, then
    ``c0, c1...`` (one a column of the state), the parameters of :func:`select_staged`."""
    state: TableState
    conversions: list[Conversion]
    batch: TableBatch
    unique: bool
    times: bool
    hidden: Collection[str] = frozenset()
    documents: dict[int, list[Any]] = field(default_factory=dict)
    size: int = 0
    """The payloads' size in UTF-8 bytes (what a transaction's bound counts; ``len`` of the
    text counts characters, up to 4 bytes each)."""

    @property
    def columns(self) -> list[ColumnInfo]:
        return self.state.columns


class StageFailed(Exception):
    """DuckDB refused a staged value; diagnose after the rollback."""

    def __init__(self, staged: Staged, cause: Exception) -> None:
        super().__init__(str(cause))
        self.staged = staged
        self.cause = cause


def encode(
    state: TableState,
    batch: TableBatch,
    newest_only: bool,
    options: EnvelopeOptions | None = READABLE,
    hidden: Collection[str] = frozenset(),
) -> Staged:
    """The changes of one table as one JSON document of columns.

    With ``newest_only``, only the newest change of each key is staged. ``options`` is the
    envelope encoding of the records that do not carry their own era (``None``: legacy): each
    run of records is decoded with the encoding it was written under, see
    :mod:`sinks.duckdb.wire`. ``hidden``: the columns whose values no error may print.

    Raises:
        RecordError: a change with a column the table does not know, or a value its column's
            encoding cannot hold.
    """
    batch = current_names(state, batch)
    conversions = [conversion(c.duck_type, c.source_type) for c in state.columns]
    unique = False
    # Across an envelope change one key's value can be in two encodings (a numeric key as
    # base64, then as text): only its decoded form tells, so SQL picks the newest per key.
    if newest_only and len(encoding_runs(batch.records, options)) < 2:
        batch, unique = newest_per_key(state, batch)
    if state.layout == "document":
        values = _document_columns(batch)
    else:
        values = _typed_columns(state, batch)
        _decode_wire(state, batch, values, options, hidden)
    for n, conv in enumerate(conversions):
        if conv.python is not None:
            values[n] = conv.python(values[n])
    staged = [batch.positions, batch.sequences, batch.ops]
    if not newest_only:
        staged.append(batch.times)
    encoded = [orjson.dumps(column) for column in (*staged, *values)]
    documents = {
        n: values[n] for n, c in enumerate(state.columns) if c.duck_type.startswith("JSON")
    }
    return Staged(
        [text.decode() for text in encoded],
        state,
        conversions,
        batch,
        unique,
        not newest_only,
        hidden,
        documents,
        sum(map(len, encoded)),
    )


def _decode_wire(
    state: TableState,
    batch: TableBatch,
    values: list[list[Any]],
    options: EnvelopeOptions | None,
    hidden: Collection[str],
) -> None:
    runs = encoding_runs(batch.records, options)
    for n, column in enumerate(state.columns):
        for run_options, start, stop in runs:
            convert = wire_conversion(column.source_type, column.duck_type, run_options)
            if convert is None:
                continue
            whole = start == 0 and stop == len(values[n])
            try:
                if whole:
                    values[n] = convert(values[n])
                else:
                    values[n][start:stop] = convert(values[n][start:stop])
            except BadWireValue as exc:
                index = start + exc.index
                why = f"it is not a {column.source_type} under the envelope settings it was "
                why += f"written with: {exc.reason}"
                value, record = values[n][index], batch.records[index]
                raise bad_value(state, column, value, hidden, why, record) from exc


Run = tuple[EnvelopeOptions | None, int, int]


def encoding_runs(records: Sequence[SinkRecord], fallback: EnvelopeOptions | None) -> list[Run]:
    """``(options, start, stop)`` of each run of ``records`` written under one encoding.

    Records carry their era (:mod:`cdc.log.eras`), ``None`` for ``fallback``, the pipeline's
    options. A log with one encoding is one run, found without looking at every record.
    """
    if not records:
        return []
    era = records[0].era
    if era is None or era.only:
        return [(fallback if era is None else era.options, 0, len(records))]
    runs: list[Run] = []
    start = 0
    for index, record in enumerate(records):
        if record.era is not era:
            runs.append((fallback if era is None else era.options, start, index))
            start, era = index, record.era
    runs.append((fallback if era is None else era.options, start, len(records)))
    return runs


def current_names(state: TableState, batch: TableBatch) -> TableBatch:
    """``batch`` with the rows written before a rename read under the column's new name.

    A sink behind the log renames a column when it first sees the new schema, so changes
    from before the rename, still to apply, carry the old name (a key column's too, which
    the newest-per-key choice reads). Only rows holding a former name are copied.
    """
    if state.layout != "typed":
        return batch
    former = state.former_names()
    if not former:
        return batch
    rows = [row if former.keys().isdisjoint(row) else _renamed(row, former) for row in batch.rows]
    return replace(batch, rows=rows)


def _renamed(row: dict[str, Any], former: dict[str, str]) -> dict[str, Any]:
    out = {name: value for name, value in row.items() if name not in former}
    for name, value in row.items():
        if name in former:
            out.setdefault(former[name], value)
    return out


def newest_per_key(state: TableState, batch: TableBatch) -> tuple[TableBatch, bool]:
    """The newest change of each key, in batch order, and whether that could be decided.

    Checking that keys are unique costs one ``dict`` over the key values, built in C; only a
    batch that repeats keys pays for picking the newest, and only one whose positions do not
    rise with the batch order (records of several partitions) pays for comparing them. Keys
    Python cannot hash are left to SQL.
    """
    if state.layout == "document":
        idents: list[Any] = [document_key(key) for key in batch.keys]
    else:
        names = [c.name for c in state.keys]
        columns = [[row.get(name) for row in batch.rows] for name in names]
        idents = columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
    try:
        last = dict(zip(idents, range(len(idents)), strict=True))
        if len(last) == len(idents):
            return batch, True
        if _rising(batch.positions, batch.sequences):
            # A key's last change is its newest.
            return batch.subset(sorted(last.values())), True
        pairs = list(zip(batch.positions, batch.sequences, strict=True))
        best: dict[Any, int] = {}
        for n, ident in enumerate(idents):
            known = best.get(ident)
            if known is None or pairs[n] > pairs[known]:
                best[ident] = n
    except TypeError:
        return batch, False
    return batch.subset(sorted(best.values())), True


def _rising(positions: list[int], sequences: list[int]) -> bool:
    """Whether the ``(position, sequence)`` pairs rise strictly with the batch order.

    Compared in C without a tuple a change: a tuple each lives long enough to cost the garbage
    collector more than the comparisons (measured: a young collection every 700 changes).
    """
    after_p, after_s = positions[1:], sequences[1:]
    if not all(map(operator.le, positions, after_p)):
        return False
    # Positions never fall: where one repeats, its sequence must rise.
    return all(
        map(
            operator.or_, map(operator.lt, positions, after_p), map(operator.lt, sequences, after_s)
        )
    )


def _typed_columns(state: TableState, batch: TableBatch) -> list[list[Any]]:
    """The batch's values, a list a column, in the order of ``state.columns``.

    Most rows hold every column: a row that holds fewer (a delete's key, a column added
    after it was written) is filled with NULLs, and each column is read by ``itemgetter``
    over the rows, in C (the ``dict.get`` a value this replaces was a third of the staging's
    Python time; a tuple a row, to ``zip``, would cost the garbage collector as much). A row
    with a column the table does not know is found by its length and named by
    :func:`_columns_by_name`.
    """
    rows = batch.rows
    names = [c.name for c in state.columns]
    width = len(names)
    if not rows:
        return [[] for _ in names]
    blank = dict.fromkeys(names)
    try:
        full = [row if len(row) == width else blank | row for row in rows]
        if max(map(len, full)) > width:
            return _columns_by_name(state, batch, names)
        return [list(map(operator.itemgetter(name), full)) for name in names]
    except (KeyError, TypeError):  # a full-length row with another column, or no dict
        return _columns_by_name(state, batch, names)


def _columns_by_name(state: TableState, batch: TableBatch, names: list[str]) -> list[list[Any]]:
    rows = batch.rows
    unknown = set().union(*rows).difference(names)
    if unknown:
        first = next(n for n, row in enumerate(rows) if not unknown.isdisjoint(row))
        raise RecordError(
            f"{state.schema}.{state.table}: columns {sorted(unknown)} are not in the published "
            "schema",
            batch.records[first],
        )
    return [[row.get(name) for row in rows] for name in names]


def _document_columns(batch: TableBatch) -> list[list[Any]]:
    # The key as canonical JSON (sorted names), so equal keys are equal text in DuckDB.
    keys = [orjson.Fragment(document_key(key)) for key in batch.keys]
    docs = [None if op == "d" else row for op, row in zip(batch.ops, batch.rows, strict=True)]
    return [keys, docs]


def _specs(staged: Staged, check: bool) -> dict[str, str]:
    """By staged column name, in the order of :attr:`Staged.payloads`, its list's JSON type
    as an SQL string literal."""
    spec: dict[str, Any] = dict(_META_SPEC)
    if staged.times:
        spec["t"] = ["BIGINT"]
    for n, conv in enumerate(staged.conversions):
        spec[f"c{n}"] = [conv.check_stage if check else conv.stage]
    return {name: orjson.dumps(s).decode().replace("'", "''") for name, s in spec.items()}


def _rows(staged: Staged, check: bool) -> str:
    """SQL for the staged rows: ``p, s, o, t, c0, c1...`` (``i`` too when checking).

    Lists unnested side by side in one ``SELECT`` are read in step, row by row."""
    function = "from_json" if check else "from_json_strict"
    columns = ", ".join(
        f"unnest({function}(?, '{spec}')) AS {name}" for name, spec in _specs(staged, check).items()
    )
    index = f", unnest(range({len(staged.batch)})) AS i" if check else ""
    return f"(SELECT {columns}{index})"


def select_staged(staged: Staged) -> str:
    """SQL selecting the staged rows, typed: positions, op, commit time, then the columns.

    It reads a parameter a staged column, the payloads: run it with :func:`run_staged`.
    """
    casts = ", ".join(
        f"{conv.expr.format(c=f'c{n}')} AS {quote(col.name)}"
        for n, (col, conv) in enumerate(zip(staged.columns, staged.conversions, strict=True))
    )
    return (
        f"SELECT p AS {POSITION}, s AS {SEQUENCE}, o AS {OP}, "
        f"{f't AS {TS}, ' if staged.times else ''}{casts} "
        f"FROM {_rows(staged, check=False)}"
    )


def run_staged(con: Any, staged: Staged, sql: str) -> None:
    """Run ``sql`` (built around :func:`select_staged`) with the payload.

    Raises:
        StageFailed: DuckDB failed, most likely on a value it could not convert; the
            transaction is now aborted, so diagnose after the rollback.
    """
    try:
        con.execute(sql, staged.payloads)
    except Exception as exc:
        raise StageFailed(staged, exc) from exc


def find_bad_value(con: Any, failed: StageFailed) -> RecordError | None:
    """The record and column whose value DuckDB cannot convert, as a ``RecordError``."""
    staged = failed.staged
    found_text = _bad_document(staged)
    if found_text is not None:
        return _blame(staged, *found_text, "it is no JSON document")
    checks = [
        f"CASE WHEN c{n} IS NOT NULL AND TRY({conv.check.format(c=f'c{n}')}) IS NULL THEN {n} END"
        for n, conv in enumerate(staged.conversions)
    ]
    sql = (
        f"SELECT i, coalesce({', '.join(checks)}) AS bad FROM {_rows(staged, check=True)} "
        "WHERE bad IS NOT NULL ORDER BY i LIMIT 1"
    )
    found = con.execute(sql, staged.payloads).fetchone()
    if found is None:
        return None
    return _blame(staged, int(found[0]), int(found[1]), duckdb_reason(failed.cause))


def _blame(staged: Staged, index: int, n: int, why: str) -> RecordError:
    column = staged.columns[n]
    value = staged.batch.rows[index].get(column.name)
    return bad_value(staged.state, column, value, staged.hidden, why, staged.batch.records[index])


def _bad_document(staged: Staged) -> tuple[int, int] | None:
    """``(row, column)`` of the first JSON text that does not parse."""
    for index in range(len(staged.batch)):
        for n, values in staged.documents.items():
            value = values[index]
            try:  # a json column's text is staged as text (sinks.duckdb.types.conversion)
                orjson.loads(value if isinstance(value, str) else orjson.dumps(value))
            except orjson.JSONDecodeError:
                return index, n
    return None
