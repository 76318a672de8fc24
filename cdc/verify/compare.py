"""``cdc verify``: do the source and each sink hold the same rows?

Both sides are read through their plugins' ``read_rows(config, schema, table)`` (an iterator of
``(key, row)``), normalised by the table's published column types (so ``Decimal('1.50')`` from
DuckDB equals ``"1.5"`` from the envelope), then compared by count, an order-independent
checksum, and key by key.

While a pipeline runs, a row can differ only because its newest change is still in flight. So a
comparison is repeated (``attempts``) and a key is reported only if it differed every time: a
change that was in flight has arrived by a later attempt, a lost or wrong one never does.

A sink that is behind the log (stopped, slow, or not running) would show every change it has
not applied yet as a difference. So each sink's lag is checked first: a table whose topic the
sink has not consumed up to the log's end offsets (as they were when the check began) is
reported *lagging*, with the offsets, and not compared. ``wait_for_sinks_s`` gives the sinks
that long to get there first.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import orjson

from cdc.contracts.schema import TableSchema
from cdc.envelope.encode import exact
from cdc.envelope.options import EnvelopeOptions
from cdc.log.base import Log
from cdc.log.encoding import read_stored
from cdc.log.eras import Eras, eras_of
from cdc.records.normalize import converter
from cdc.records.values import decoder
from cdc.verify.comparison import NO_SCHEMA, RowDecoding, RowReader, TableComparison
from cdc.verify.keyless import keyless_guard
from cdc.verify.lag import lagging
from cdc.verify.ranges import (
    DETAILED,
    Candidates,
    EntryReader,
    KeyFilter,
    Range,
    compare_streams,
    in_range,
    persistent,
    recheck,
    row_hash,
)
from cdc.verify.sources import source_reader
from cdc.verify.sources import unverifiable as unverifiable_reason

#: The reason a side is not verifiable at all (the jsonl sink, the generator source).
UNREADABLE = "cannot be read back"


def _entry(key: dict[str, Any], row: dict[str, Any], schema: TableSchema) -> tuple[bytes, bytes]:
    """One row's canonical key JSON and row JSON, each in a bytes object of its own size."""
    key_json, row_json = _entry_maker(schema)(key, row)
    return exact(key_json), exact(row_json)


Entry = Callable[[dict[str, Any], dict[str, Any]], tuple[bytes, bytes]]


def _entry_maker(schema: TableSchema) -> Entry:
    """:func:`_entry` without the copies, each column's converter chosen once for the table
    (a pass discards most entries at once; :mod:`.ranges` copies those it holds)."""
    columns = [(c.name, converter(c.type, nulls=False)) for c in schema.columns]
    key_columns = schema.key_columns
    sort = orjson.OPT_SORT_KEYS
    dumps = orjson.dumps

    def entry(key: dict[str, Any], row: dict[str, Any]) -> tuple[bytes, bytes]:
        get = row.get
        canonical = {
            name: None if (value := get(name)) is None else convert(value)
            for name, convert in columns
        }
        key_part = {c: canonical.get(c, key.get(c)) for c in key_columns} if key_columns else key
        return dumps(key_part, option=sort), dumps(canonical, option=sort)

    return entry


def _entries(
    read: RowReader,
    schema: TableSchema,
    decodings: Sequence[RowDecoding] = (),
    within: Range | None = None,
) -> EntryReader:
    """``read``'s rows as canonical entries: one each, decoded by ``decodings`` (one each, or
    one per decoding: the newest first, a row stored under an older era matches the source under
    its own, see :func:`compare_table`); ``within``: only the rows whose key hashes into that
    range. A row the pass's filter refuses is left out after only its key columns were decoded
    and canonicalised (a pass after the first wants a few rows of many)."""
    key_of = _key_maker(schema)
    entry = _entry_maker(schema)
    key_columns = schema.key_columns

    def key_part(row: dict[str, Any]) -> dict[str, Any]:
        return {c: row[c] for c in key_columns if c in row} if key_columns else row

    def entries(wanted: KeyFilter | None = None) -> Iterator[Candidates]:
        if wanted is None and within is None and len(decodings) < 2:
            yield from _all_entries(read, entry, decodings[0] if decodings else None)
            return
        for key, row in read():
            if wanted is not None or within is not None:
                part = key_part(row)
                parts = [decode(part) for decode in decodings] if decodings else [part]
                keys = [key_of(key, p) for p in parts]
                if within is not None and not any(in_range(k, within) for k in keys):
                    continue
                if wanted is not None and not any(wanted(k) for k in keys):
                    continue
            if decodings:
                yield [entry(key, decode(row)) for decode in decodings]
            else:
                yield [entry(key, row)]

    return entries


def _all_entries(read: RowReader, entry: Entry, decode: RowDecoding | None) -> Iterator[Candidates]:
    """Every row's entry, under one decoding or none: the first pass's loop, once a row."""
    if decode is None:
        for key, row in read():
            yield (entry(key, row),)
    else:
        for key, row in read():
            yield (entry(key, decode(row)),)


def _key_maker(schema: TableSchema) -> Callable[[dict[str, Any], dict[str, Any]], bytes]:
    """The canonical key JSON of a row, as :func:`_entry` makes it, from its key columns only."""
    columns = schema.key_columns
    converters = {c.name: converter(c.type) for c in schema.columns}
    typed = [(c, converters.get(c)) for c in columns]

    def key_of(key: dict[str, Any], row: dict[str, Any]) -> bytes:
        if not columns:
            return orjson.dumps(key, option=orjson.OPT_SORT_KEYS)
        part = {c: key.get(c) if convert is None else convert(row.get(c)) for c, convert in typed}
        return orjson.dumps(part, option=orjson.OPT_SORT_KEYS)

    return key_of


def checksum(state: dict[bytes, bytes]) -> str:
    """Order-independent: the sum of the rows' 64-bit hashes."""
    total = sum(row_hash(key, row) for key, row in state.items())
    return f"{total % (1 << 64):016x}"


def compare_table(
    table: str,
    sink: str,
    schema: TableSchema,
    read_source: RowReader,
    read_sink: RowReader,
    attempts: int = 3,
    wait_s: float = 2.0,
    limit: int = 20,
    sink_decodings: Sequence[RowDecoding] = (),
    within: Range | None = None,
    source_decoding: RowDecoding | None = None,
) -> TableComparison:
    """Compare one table by range digests (:mod:`.ranges`: memory flat as the table grows);
    keys are reported only if they differed in every attempt, a later attempt looking again
    at the keys that differed only.

    ``sink_decodings``: the sink's rows are as the envelope carried them, in one of several
    encodings (the log's eras, newest first, :mod:`cdc.log.eras`), and the store does not say
    which: each row is decoded with the first under which it equals the source's row, or with
    the newest if none does (a difference). Empty: ``read_sink``'s rows are compared as read.
    ``within``: only the keys hashing into that range (a sample, :mod:`cdc.runtime.verifier`).
    ``source_decoding``: how the source's rows are decoded (none: compared as read).
    """
    source_decodings = () if source_decoding is None else (source_decoding,)
    source = _entries(read_source, schema, source_decodings, within)
    sink_entries = _entries(read_sink, schema, sink_decodings, within)
    looks = max(1, attempts)
    # With more looks to come, the first finds the differing keys by hash only and the next
    # look reads them whole; alone, it reads them whole at once.
    found = compare_streams(source, sink_entries, resolve=looks == 1)
    result = TableComparison(table, sink)
    result.source_count, result.sink_count = found.counts
    result.source_checksum, result.sink_checksum = found.checksum(0), found.checksum(1)
    for _ in range(1, looks):
        if not found:
            break
        time.sleep(wait_s)
        found = persistent(found, recheck(source, sink_entries, found.key_hashes()))
    result.keys = (found.missing, found.extra, found.different)
    result.missing, result.extra, result.different = (
        [orjson.loads(k) for k in sorted(keys)[:limit]] for keys in result.keys
    )
    result.details = [
        _column_differences(k, *found.rows[k])
        for k in sorted(found.different)[:DETAILED_DIFFERENCES]
        if k in found.rows
    ]
    return result


DETAILED_DIFFERENCES = DETAILED


def _column_differences(key: bytes, source_row: bytes, sink_row: bytes) -> dict[str, Any]:
    """Which columns of one key differ, with both canonical values."""
    source, sink = orjson.loads(source_row), orjson.loads(sink_row)
    columns = {
        name: {"source": source.get(name), "sink": sink.get(name)}
        for name in source.keys() | sink.keys()
        if source.get(name) != sink.get(name)
    }
    return {"key": orjson.loads(key), "columns": columns}


def verify_pipeline(
    pipeline: Any,
    catalog: Any,
    attempts: int = 3,
    wait_s: float = 2.0,
    limit: int = 20,
    *,
    log: Log | None = None,
    wait_for_sinks_s: float = 0.0,
    sinks: Sequence[str] = (),
    tables: Sequence[str] = (),
    within: Range | None = None,
) -> list[TableComparison]:
    """Compare every table of every sink that can be read back with the source.

    Args:
        pipeline: a validated :class:`cdc.config.pipeline.Pipeline`.
        catalog: the schema lookup (``get(schema, table)``) of the pipeline's log.
        log: the pipeline's log, to check each sink's lag first (``None``: no check).
        wait_for_sinks_s: how long lagging sinks get to reach the log's end before they are
            reported lagging.
        sinks: only these sinks (default: all).
        tables: only these tables, ``schema.table`` (default: all of each sink's).
        within: only the keys hashing into this range (default: every key).
    """
    from cdc.contracts import plugins

    read_source = _read_rows(plugins.SOURCE_GROUP, pipeline.source.type)
    selected = [s for s in pipeline.sinks if not sinks or s.name in sinks]
    wanted = _wanted(pipeline, selected, tables)
    behind = {} if log is None else lagging(log, pipeline.name, wanted, wait_for_sinks_s)
    encodings = () if log is None else _encodings(eras_of(read_stored(log, pipeline.name)))
    compare = functools.partial(
        compare_table, attempts=attempts, wait_s=wait_s, limit=limit, within=within
    )
    results = []
    for sink in selected:
        readers = (read_source, _read_rows(plugins.SINK_GROUP, sink.type))
        for name in wanted[sink.name]:
            results.append(
                _verify_table(pipeline, sink, name, catalog, readers, behind, compare, encodings)
            )
    return results


def _wanted(
    pipeline: Any, selected: Sequence[Any], tables: Sequence[str]
) -> dict[str, list[tuple[str, str]]]:
    """Each selected sink's tables, only ``tables`` (``schema.table``) when given."""
    return {
        s.name: [t for t in pipeline.sink_tables(s) if not tables or f"{t[0]}.{t[1]}" in tables]
        for s in selected
    }


def _read_rows(group: str, type_name: str) -> Any:
    """The plugin's ``read_rows``, or ``None`` if it cannot be read back."""
    from cdc.contracts import plugins

    return getattr(plugins.load(group, type_name), "read_rows", None)


def _verify_table(
    pipeline: Any,
    sink: Any,
    table: tuple[str, str],
    catalog: Any,
    readers: tuple[Any, Any],
    behind: dict[tuple[str, str], dict[str, Any]],
    compare: Callable[..., TableComparison],
    encodings: tuple[EnvelopeOptions | None, ...] = (),
) -> TableComparison:
    """Compare one table of one sink; ``encodings`` are the log's, newest first (a sink that
    keeps rows as the envelope carried them can hold each of them)."""
    schema_name, table_name = table
    name, schema = f"{schema_name}.{table_name}", catalog.get(schema_name, table_name)
    read_source, read_sink = readers
    unread = _not_compared(name, sink, schema, behind, read_source, read_sink)
    if unread is not None:
        return unread
    assert schema is not None  # _not_compared answered for a table without one
    unverifiable = unverifiable_reason(pipeline, name)
    if unverifiable is not None:
        return TableComparison(name, sink.name, unverifiable=unverifiable)
    envelope = pipeline.envelope
    source_rows, judge = keyless_guard(pipeline, name, source_reader(pipeline, read_source, name))
    sink_rows = _reader(read_sink, sink, schema_name, table_name, pipeline=pipeline.name)
    # Rows are decoded from the envelope encoding (cdc.records.values) as they are compared,
    # so rows encoded alike and rows a sink decoded compare alike.
    source = _row_decoding(schema, envelope)
    if _decodes_rows(sink.type):
        decodings: list[RowDecoding] = []
    elif len(encodings) < 2:  # one encoding in the log: every row is in it
        decodings = [_row_decoding(schema, encodings[0] if encodings else envelope)]
    else:
        decodings = [_row_decoding(schema, options) for options in encodings]
    compared = compare(
        name,
        sink.name,
        schema,
        source_rows,
        sink_rows,
        sink_decodings=decodings,
        source_decoding=source,
    )
    return judge(compared)


def _encodings(eras: Eras | None) -> tuple[EnvelopeOptions | None, ...]:
    """The distinct options of the log's eras, newest first (empty: none stored)."""
    if eras is None:
        return ()
    return tuple(dict.fromkeys(era.options for era in eras.all))


def _decodes_rows(sink_type: str) -> bool:
    """Whether a sink's ``read_rows`` gives values by their meaning (``Decimal``, ``date``...,
    as DuckDB does: ``rows_decoded = True`` on the plugin), not as the envelope encodes them."""
    from cdc.contracts import plugins

    return bool(getattr(plugins.load(plugins.SINK_GROUP, sink_type), "rows_decoded", False))


def _row_decoding(schema: TableSchema, envelope: EnvelopeOptions | None) -> RowDecoding:
    strict = {c.name: decoder(c.type, envelope) for c in schema.columns}
    lenient = {name: _lenient(decode) for name, decode in strict.items()}

    def decode(row: dict[str, Any]) -> dict[str, Any]:
        # The whole row at once, and value by value only when a value does not decode: the
        # same row (decoders have no effects), a frame less for each value.
        try:
            return {n: strict.get(n, _same)(v) for n, v in row.items()}
        except _UNDECODABLE:
            return {n: lenient.get(n, _same)(v) for n, v in row.items()}

    return decode


def _same(value: Any) -> Any:
    return value


_UNDECODABLE = (ValueError, TypeError, KeyError, ArithmeticError)  # InvalidOperation too


def _lenient(decode: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # A value not in the pipeline's encoding is compared as it is: reported as a difference
    # of that column, not a crash of the whole verification.
    def run(value: Any) -> Any:
        try:
            return decode(value)
        except _UNDECODABLE:
            return value

    return run


def _not_compared(
    name: str,
    config: Any,
    schema: TableSchema | None,
    behind: dict[tuple[str, str], dict[str, Any]],
    read_source: Any,
    read_sink: Any,
) -> TableComparison | None:
    """The result for a table that is not compared: its sink is lagging, a side cannot be
    read back, or no schema was published for it yet (``None``: compare it)."""
    sink = config.name
    if (sink, name) in behind:
        return TableComparison(name, sink, lag=behind[(sink, name)])
    if read_sink is None:
        return TableComparison(name, sink, unverifiable=f"{config.type} sinks {UNREADABLE}")
    if read_source is None:
        return TableComparison(name, sink, unverifiable=f"the source type {UNREADABLE}")
    if schema is None:
        return TableComparison(name, sink, missing=[NO_SCHEMA])
    return None


def _reader(read_rows: Any, config: Any, schema: str, table: str, **options: Any) -> RowReader:
    def read() -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
        rows: Iterable[tuple[dict[str, Any], dict[str, Any]]] = read_rows(
            config, schema, table, **options
        )
        return rows

    return read
