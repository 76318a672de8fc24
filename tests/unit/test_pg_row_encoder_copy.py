"""The native row encoder on the snapshot paths: COPY lines, snapshot and watermark records.

Differential, as ``tests/unit/test_pg_row_encoder.py`` (whose cases and helpers it shares): every
``COPY ... TO STDOUT`` line goes through both paths, and the records an initial snapshot and a
watermark window write must equal the Python path's, byte for byte.
"""

from __future__ import annotations

import dataclasses
import random
import tracemalloc
from typing import Any

import pytest

from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.envelope import encode as envelope
from cdc.envelope.encode import EncodedRow
from cdc.envelope.options import EnvelopeOptions
from connectors.postgres.assembly.relation_state import RelationState, build_state
from connectors.postgres.catalog import TableInfo
from connectors.postgres.pgoutput import Relation
from connectors.postgres.snapshot.reader import SnapshotTable, lines_of
from connectors.postgres.snapshot.rows import keyed_lines, to_records
from connectors.postgres.snapshot.window_rows import ChunkJob, window_records
from connectors.postgres.types import row_encoder
from connectors.postgres.types.encoder import PythonRowEncoder
from snapshots.chunks import KeyChunk
from tests.services.common import in_ci
from tests.unit.test_pg_row_encoder import (
    CASES,
    COLUMN_CASES,
    SETTING_IDS,
    SETTINGS,
    _columns,
    _implementations,
    _native_oids,
    _outcome,
    _python,
    _registry,
)

# Outside CI a machine without Rust runs the pure-Python path only; in CI the encoder must exist.
pytestmark = pytest.mark.skipif(
    not row_encoder.available() and not in_ci(),
    reason="the native encoder is not built (no Rust toolchain)",
)


def _copy_line(values: tuple[str | None, ...]) -> bytes:
    """A row as ``COPY ... TO STDOUT`` writes it in text format."""
    escapes = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
    fields = ("\\N" if v is None else v.translate(escapes) for v in values)
    return ("\t".join(fields) + "\n").encode()


# With a column only Python converts, the encoder keeps the interpreter lock for the piece;
# without one it releases it, and a value it cannot write alone is written again with the lock.
@pytest.mark.parametrize("options", SETTINGS, ids=SETTING_IDS)
@pytest.mark.parametrize("native_only", [False, True], ids=["with-python", "native"])
def test_copy_lines_give_the_python_records_or_are_declined(
    native_only: bool, options: EnvelopeOptions
) -> None:
    oids = _native_oids(options) if native_only else list(CASES)
    registry = _registry(options)
    columns = _columns(oids)
    encoder = row_encoder.native_encoder(columns, registry, [0])
    assert encoder is not None
    rng = random.Random(43)
    rows = [
        (
            str(rng.randrange(10**9)),
            *(None if rng.random() < 0.8 else rng.choice(CASES[oid]) for oid in oids),
        )
        for _ in range(2000)
    ]
    lines = [_copy_line(values) for values in rows]
    lines[7] = lines[7][:-1]  # the newline is optional
    written = encoder.copy_records(lines, b"<", b"|", b">", 10)
    native = 0
    for values, line, record in zip(rows, lines, written, strict=True):
        expected = _python(columns, registry, values)
        if isinstance(expected, type):  # a converter raises: the Python path reports it
            assert record is None
        elif record is None:  # an escape in the line: the Python path splits it
            assert b"\\" in line.replace(b"\\N", b"")
        else:
            row_json, _, key_json = expected
            # The line's sequence is its record's position, beside the value: not in it.
            assert record == (key_json, b"<%b|>" % row_json)
            native += 1
    assert native > 200
    some_row = _copy_line(("1",) + (None,) * len(oids))
    assert encoder.copy_records([b"1\tx\n"], b"", b"", b"", 0) == [None]  # too few columns
    assert encoder.copy_records([b"\xff" + some_row], b"", b"", b"", 0) == [None]  # not UTF-8
    assert encoder.copy_records([some_row], b"", b"", b"", 0)[0] is not None
    assert encoder.copy_records([], b"", b"", b"", 0) == []
    assert encoder.copy_records([some_row, some_row], b"", b"", b"", 2**63 - 1)[1] is None


def _snapshot_state() -> tuple[TableInfo, RelationState]:
    """Table ``public.t`` of every case's column, keyed by ``id``."""
    relation = Relation(7, "public", "t", "d", tuple(_columns()))
    info = TableInfo("public", "t", 7, "d", ("id",))
    return info, build_state("p", info, relation, _registry(), None, set(), 0)


def _convertible_rows(count: int, seed: int) -> list[tuple[str | None, ...]]:
    """Random rows of every case's column (``id`` first) that the converters accept."""
    registry, columns = _registry(), _columns()
    rng = random.Random(seed)
    rows: list[tuple[str | None, ...]] = []
    while len(rows) < count:
        values = (
            str(len(rows)),
            *(None if rng.random() < 0.8 else rng.choice(cases) for *_, cases in COLUMN_CASES),
        )
        if not isinstance(_python(columns, registry, values), type):  # only rows that convert
            rows.append(values)
    return rows


def test_snapshot_records_equal_the_python_records() -> None:
    info, state = _snapshot_state()
    table = SnapshotTable(info, state, ("id",))
    rows = _convertible_rows(500, 41)
    lines = [_copy_line(v) for v in rows]
    assert sum(b"\\" in line.replace(b"\\N", b"") for line in lines) >= 100  # declined
    options: dict[str, Any] = dict(pipeline="p", db="db", position=99, chunk=3, flag="true")
    records = to_records(table, lines, first_row=10, ts_ms=1, now_ms=5, **options)
    assert len(records) == len(rows)
    for sequence, (record, values) in enumerate(zip(records, rows, strict=True), (3 << 32) + 10):
        lsn = {"lsn": 99, "xmin": None, "origin": None, "origin_lsn": None}
        source = SourceInfo(
            "postgresql",
            "db",
            "public",
            "t",
            1,
            99,
            sequence,
            "true",
            None,
            lsn,
            None,
            '[null,"99"]',
        )
        key = {"id": int(values[0])}
        reference = ChangeEvent(Op.READ, key, None, state.convert(values), source)
        assert [record] == envelope.to_records(reference, "p", 5)
    python_only = SnapshotTable(
        info,
        dataclasses.replace(state, encoder=PythonRowEncoder(state.convert, state.key)),
        ("id",),
    )
    assert to_records(python_only, lines, first_row=10, ts_ms=1, now_ms=5, **options) == records


def test_watermark_window_records_equal_the_python_records() -> None:
    info, state = _snapshot_state()
    job = ChunkJob(SnapshotTable(info, state, ("id",)), KeyChunk(2, None, None), None)
    lines = [_copy_line(values) for values in _convertible_rows(300, 47)]
    rows = keyed_lines(state, lines)
    python_rows = keyed_lines(
        dataclasses.replace(state, encoder=PythonRowEncoder(state.convert, state.key)), lines
    )
    assert sum(isinstance(after, EncodedRow) for after, _ in rows) >= 100  # written natively
    for (after, key_json), (python_after, python_key_json) in zip(rows, python_rows, strict=True):
        assert key_json == python_key_json == envelope.encode_key({"id": python_after["id"]})
        assert envelope.dumps(dict(after)) == envelope.dumps(python_after)  # decoded on demand
    records = window_records(job, rows, pipeline="p", db="db", position=77, ts_ms=3, now_ms=5)
    python_records = window_records(
        job, python_rows, pipeline="p", db="db", position=77, ts_ms=3, now_ms=5
    )
    assert records == python_records
    for sequence, (record, (after, _)) in enumerate(zip(records, rows, strict=True), 2 << 32):
        # Debezium's incremental snapshot rows: no lsn of their own, the stream's position twice
        lsn = {"lsn": None, "xmin": None, "origin": None, "origin_lsn": None}
        source = SourceInfo(
            "postgresql",
            "db",
            "public",
            "t",
            3,
            77,
            sequence,
            "incremental",
            None,
            lsn,
            None,
            '["77","77"]',
        )
        key = {"id": after["id"]}
        reference = ChangeEvent(Op.READ, key, None, dict(after), source)
        assert [record] == envelope.to_records(reference, "p", 5)


def test_record_keys_and_values_take_their_own_size_in_memory() -> None:
    # orjson 3.12+ returns even small documents in 4 KiB buffers (sys.getsizeof does not show
    # it, tracemalloc does); records in a batch and keys in a watermark window are kept.
    event = ChangeEvent(
        Op.DELETE, {"id": 1}, {"id": 1}, None, SourceInfo("c", "d", "s", "t", 1, 2, 3)
    )
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [
            (envelope.encode_key({"id": n}), envelope.encode_value_dict(event, "p", n))
            for n in range(1000)
        ]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    data = sum(len(k) + len(v) for k, v in kept)
    assert held < 2 * data + 150_000, f"{held:,} bytes held for {data:,} bytes of records"


def test_blocks_of_several_copy_lines_split_into_rows() -> None:
    assert lines_of(b"1\ta\n\n2\t\\N\n") == [b"1\ta", b"", b"2\t\\N"]
    assert lines_of(b"\n") == [b""]  # one row of one empty text column
    assert lines_of(b"") == []


@pytest.mark.parametrize("oids", [list(CASES), _native_oids()], ids=["with-python", "native"])
def test_both_encoders_write_the_same_copy_records_and_rows(oids: list[int]) -> None:
    registry = _registry()
    columns = _columns(oids)
    python, rust = _implementations(columns, registry)
    rng = random.Random(53)
    rows = [
        (str(n), *(None if rng.random() < 0.8 else rng.choice(CASES[oid]) for oid in oids))
        for n in range(600)
    ]
    lines = [_copy_line(values) for values in rows]
    template = envelope.RecordTemplate(b"<", b"|", b"(", b"[", b"]", b">")
    for piece in (lines[i : i + 7] for i in range(0, len(lines), 7)):
        args = (piece, template, b'"s"', b"}", 5, 3 << 32)
        assert _outcome(rust.copy_records, *args) == _outcome(python.copy_records, *args)
        assert _outcome(rust.copy_rows, piece) == _outcome(python.copy_rows, piece)
    good = [
        line
        for line, values in zip(lines, rows, strict=True)
        if not isinstance(_python(columns, registry, values), type)
    ]
    assert len(good) > 100
    assert rust.copy_records(good, template, b'"s"', b"}", 5, 0) == python.copy_records(
        good, template, b'"s"', b"}", 5, 0
    )
