"""The native row encoder writes exactly what the Python converters and orjson write.

Differential: every value goes through both paths, and the bytes (and key values) must be equal.
The values are the text forms PostgreSQL 15 sends under the source's session settings, edge
cases included, plus random ones; and the Insert messages captured from a real server. The
COPY and snapshot paths, on these cases and helpers, are
``tests/unit/test_pg_row_encoder_copy.py``'s.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from cdc.contracts.events import ChangeEvent, Op, SourceInfo
from cdc.envelope import encode as envelope
from cdc.envelope.encode import EncodedRow
from cdc.envelope.options import READABLE, EnvelopeOptions
from connectors.postgres.assembly.assembler import Assembler
from connectors.postgres.assembly.toast import ToastFiller
from connectors.postgres.catalog import TableInfo
from connectors.postgres.lsn import str_to_lsn
from connectors.postgres.pgoutput import Insert, Relation, RelationColumn, decode
from connectors.postgres.types import TypeEntry, TypeRegistry, row_converter, row_encoder
from connectors.postgres.types.encoder import PythonRowEncoder, RowEncoder
from tests.services.common import in_ci
from tests.unit import debezium_workload as w
from tests.unit.test_pg_stream import FakeCatalog, FakeLog

# Outside CI a machine without Rust runs the pure-Python path only; in CI the encoder must exist.
pytestmark = pytest.mark.skipif(
    not row_encoder.available() and not in_ci(),
    reason="the native encoder is not built (no Rust toolchain)",
)

ENUM_OID, DOMAIN_OID, DOMAIN_ARRAY_OID = 90001, 90002, 90003

# Column type OID -> text values to try (PostgreSQL's output forms, odd ones included).
CASES: dict[int, list[str]] = {
    20: ["0", "1", "-1", "9223372036854775807", "-9223372036854775808", "123456789012345678"],
    21: ["-32768", "32767", "007", "-0", "+5"],
    23: ["42", "1234567890123456789012"],
    25: ["", "plain", 'quote " and \\ back', "tab\tnew\nline\r\x01\x1f\x7f", "ünïcödé ✓ 😀"],
    1043: ["v1", "/slash/", "\u2028"],
    1042: ["ab ", "xyz"],
    16: ["t", "f", "true"],
    1700: [
        *("1.25", "NaN", "-0.000001", "123456789012345678901234.5", "Infinity", "-Infinity"),
        *("12.3400", "2.5000000000000000", "100", "0.000", "0", "-5.10", "100000", "1.10"),
    ],
    700: ["1.5", "NaN", "Infinity", "-Infinity", "3e+10", "1.0000001"],
    701: ["0.1", "-1e+300", "2.5", "1e-05"],
    17: ["\\x", "\\xdeadbeef"],
    1082: ["2024-02-29", "0044-03-15 BC", "infinity", "-infinity", "12345-01-01"],
    1083: ["12:34:56", "12:34:56.789012", "00:00:00", "24:00:00", "1:2:3"],
    1266: ["12:34:56.789+05:30", "01:02:03-08"],
    1114: ["2024-01-01 00:01:00", "2024-01-01 00:01:00.5", "0044-03-15 12:00:00 BC", "infinity"],
    1184: [
        "2024-01-01 00:01:00+00",
        "2024-02-29 13:45:30.5+00",
        "2024-02-29 13:45:30.12345+00",
        "2024-02-29 13:45:3x.5+00",
        "2024-01-01 00:01:00.123456+00",
        "2024-01-01 05:31:00+05:30",
        "0044-03-15 12:00:00+00 BC",
        "-infinity",
        "12345-06-07 08:09:10+00",
    ],
    1186: ["1 year 2 mons 3 days 04:05:06.5", "-1 days +02:03:00", "00:00:00"],
    2950: ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"],
    114: ['{"k": 1, "nested": {"list": [1, "two", null]}}', "12345678901234567890123"],
    3802: [
        '{"n": 12.5, "tags": ["a", "b"]}',
        '{"big": 1.0000000000000000001}',
        "[]",
        "{}",
        '{"k": 3, "tag": "t5"}',
        '{"a": null, "b": [true, false, {}], "c": {"d": [-7, 0, 123456789012345678]}}',
        '{"q": "say \\"hi\\"", "t": "tab\\there"}',
        '{"u": "ünïcödé ✓ 😀 \u2028", "e": ""}',
        '{"big": 12345678901234567890, "neg": -9223372036854775808}',
        '{"x": 1e+30, "y": -0.5, "z": 100}',
        '"just a string"',
        "-12",
        "true",
        "null",
        "[" * 200 + "]" * 200,  # deeper than the native path writes: Python's converter does
        '{"a": ' * 300 + "1" + "}" * 300,  # deeper than orjson writes: an error either way
    ],
    1007: ["{1,NULL,3}", "{}", "{{1,2},{3,4}}", "[0:1]={1,2}", "{007}", "{-0}"],
    1009: ['{x,NULL,"y,z","q\\"t"}', "{a,b}", "{}", '{""}', "{ünï,✓}", "{NULL}"],
    1000: ["{t,f,NULL}", "{t,x}"],
    1016: ["{9223372036854775807,-1}"],
    1185: ['{"2024-01-01 00:01:00+00",NULL}'],
    1231: ["{1.5,NaN}"],
    3807: ['{"{\\"a\\": 1}"}'],
    ENUM_OID: ["happy", "sad"],
    DOMAIN_OID: ["5", "999"],
    DOMAIN_ARRAY_OID: ["{1,2}", "{NULL}"],
}


#: Columns with a typmod: (type OID, typmod, values); their form depends on it.
TYPMOD_CASES: list[tuple[int, int, list[str]]] = [
    (1700, (12 << 16 | 2) + 4, ["1234567890.12", "-0.01", "0.10", "NaN"]),
    (1083, 3, ["13:45:30.123", "00:00:00"]),
    (1114, 3, ["2024-02-29 13:45:30.123", "1969-12-31 23:59:59.999"]),
    (1231, (12 << 16 | 2) + 4, ["{1.50,NaN,NULL}"]),
    # timestamptz(p): Debezium pads the fraction to p digits (none for 0), 6 without a p.
    *[(1184, p, ["2024-06-30 09:59:59+00", "2000-01-01 10:00:00.1+00"]) for p in (0, 1, 5)],
    (1184, 3, ["2000-01-01 07:59:59.999+00", "2000-01-01 07:59:59.9999+00", "infinity"]),
    (1184, 2, ["0044-03-15 12:00:00+02 BC", "2000-01-01 10:00:00.1+00", "2000-01-01 10:00:00+00"]),
]
#: Every column of the differential tests: (type OID, typmod, values).
COLUMN_CASES = [(oid, -1, values) for oid, values in CASES.items()] + TYPMOD_CASES
#: The five captured Debezium settings (tests/debezium/expected).
SETTINGS = [w.options(setting) for setting in w.SETTINGS]
SETTING_IDS = list(w.SETTINGS)


def _registry(options: EnvelopeOptions = READABLE) -> TypeRegistry:
    registry = TypeRegistry(options)
    registry.add(TypeEntry(ENUM_OID, "mood", "enum", namespace="public"))
    registry.add(TypeEntry(DOMAIN_OID, "posint", "domain", base_oid=23, namespace="public"))
    registry.add(TypeEntry(DOMAIN_ARRAY_OID, "_posint", "array", DOMAIN_OID, category="A"))
    return registry


def _columns(oids: list[int] | None = None) -> list[RelationColumn]:
    """An ``id`` column, then one per case (``oids``: those types only, no typmods)."""
    columns = [RelationColumn(True, "id", 20, -1)]
    if oids is not None:
        return columns + [RelationColumn(False, f"c{oid}", oid, -1) for oid in oids]
    columns += [
        RelationColumn(False, f"c{oid}_{typmod}", oid, typmod) for oid, typmod, _ in COLUMN_CASES
    ]
    return columns


def _native_oids(options: EnvelopeOptions = READABLE) -> list[int]:
    """The cases' types the encoder writes without a Python converter (most of their values)."""
    registry = _registry(options)
    return [oid for oid in CASES if row_encoder._kind(registry, oid, -1)[0] != row_encoder.PYTHON]


def _python(columns: list[RelationColumn], registry: TypeRegistry, values: tuple[Any, ...]) -> Any:
    try:
        row = row_converter(columns, registry)(values)
        key = {columns[0].name: row[columns[0].name]}
        return envelope.dumps(row), key, envelope.encode_key(key)
    except Exception as exc:  # the native path must then decline too
        return type(exc)


def _native(encoder: Any, values: tuple[Any, ...]) -> Any:
    try:
        return encoder.encode_values(values)
    except Exception as exc:
        return type(exc)


@pytest.mark.parametrize("options", SETTINGS, ids=SETTING_IDS)
def test_every_case_alone_gives_the_python_bytes(options: EnvelopeOptions) -> None:
    registry = _registry(options)
    columns = _columns()
    encoder = row_encoder.native_encoder(columns, registry, [0])
    assert encoder is not None
    compared = 0
    for position, (oid, _, cases) in enumerate(COLUMN_CASES, start=1):
        for text in [*cases, None]:
            values = tuple(
                "7" if i == 0 else (text if i == position else None) for i in range(len(columns))
            )
            expected, got = _python(columns, registry, values), _native(encoder, values)
            if isinstance(expected, type):  # Python rejects it: native declines or raises
                assert got is None or isinstance(got, type), (oid, text, got)
            else:
                assert got == expected, (oid, text)
                compared += 1
    assert compared > 100


@pytest.mark.parametrize("options", SETTINGS, ids=SETTING_IDS)
def test_random_rows_give_the_python_bytes(options: EnvelopeOptions) -> None:
    registry = _registry(options)
    columns = _columns()
    encoder = row_encoder.native_encoder(columns, registry, [0])
    assert encoder is not None
    rng = random.Random(11)
    for _ in range(3000):
        others = [None if rng.random() < 0.15 else rng.choice(cases) for *_, cases in COLUMN_CASES]
        values = (str(rng.randrange(-(10**12), 10**12)), *others)
        expected, got = _python(columns, registry, values), _native(encoder, values)
        if isinstance(expected, type):
            assert got is None or isinstance(got, type)
        else:
            assert got == expected, values


def test_random_text_is_escaped_as_orjson_does() -> None:
    registry = TypeRegistry()
    columns = [RelationColumn(True, "k", 25, -1), RelationColumn(False, 'na"me\n', 25, -1)]
    encoder = row_encoder.native_encoder(columns, registry, [0])
    assert encoder is not None
    rng = random.Random(3)
    alphabet = [chr(c) for c in range(0, 0x80)] + ["é", "✓", "😀", "\u2028", "\ufeff"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        values = (text, text[::-1])
        assert encoder.encode_values(values) == _python(columns, registry, values)


def test_key_values_keep_their_python_types() -> None:
    registry = TypeRegistry()
    columns = [
        RelationColumn(True, "a", 23, -1),
        RelationColumn(True, "b", 25, -1),
        RelationColumn(True, "c", 1184, -1),
        RelationColumn(True, "d", 1700, -1),
        RelationColumn(False, "e", 701, -1),
    ]
    encoder = row_encoder.native_encoder(columns, registry, [3, 0, 2, 1])
    assert encoder is not None
    result = encoder.encode_values(("-12", "x", "2024-01-01 00:00:00+00", "1.50", "NaN"))
    assert result is not None
    row, key, key_json = result
    assert key == {"d": "1.50", "a": -12, "c": "2024-01-01T00:00:00.000000Z", "b": "x"}
    assert list(key) == ["d", "a", "c", "b"]  # key order, not column order
    assert key_json == envelope.encode_key(key)
    assert json.loads(row) == {
        "a": -12,
        "b": "x",
        "c": "2024-01-01T00:00:00.000000Z",
        "d": "1.50",
        "e": "NaN",
    }


def test_declines_what_only_python_handles() -> None:
    registry = TypeRegistry()
    columns = [RelationColumn(True, "id", 23, -1), RelationColumn(False, "t", 25, -1)]
    encoder = row_encoder.native_encoder(columns, registry, [0])
    assert encoder is not None
    assert encoder.encode_values(("1",)) is None  # wrong column count
    head = b"I" + struct.pack(">I", 1) + b"N" + struct.pack(">H", 2) + b"t\x00\x00\x00\x011"
    assert encoder.encode_tuple(head + b"u", 6) is None  # unchanged TOAST value
    assert encoder.encode_tuple(head + b"b\x00\x00\x00\x01x", 6) is None  # binary value
    assert encoder.encode_tuple(head + b"t\x00\x00\x00\x02\xff\xfe", 6) is None  # bad UTF-8
    assert encoder.encode_tuple(head + b"t\x00\x00\x00\x09short", 6) is None  # truncated
    assert encoder.encode_tuple(head + b"n", 6) == (b'{"id":1,"t":null}', {"id": 1}, b'{"id":1}')
    with pytest.raises(ValueError):
        encoder.encode_values(("x", "a"))  # int('x'): the Python converter's error


def test_captured_inserts_give_the_python_bytes() -> None:
    fixture = Path(__file__).parent / "data" / "pgoutput" / "v1.json"
    raw = [bytes.fromhex(data) for _, _, data in json.loads(fixture.read_text())["messages"]]
    relations = {m.oid: m for m in map(decode, raw) if type(m).__name__ == "Relation"}
    registry = TypeRegistry()
    checked = 0
    for data in raw:
        message = decode(data)
        if not isinstance(message, Insert) or message.relation_oid not in relations:
            continue
        columns = list(relations[message.relation_oid].columns)  # type: ignore[attr-defined]
        encoder = row_encoder.native_encoder(columns, registry, [0])
        assert encoder is not None
        expected = _python(columns, registry, message.new)
        got = encoder.encode_tuple(data, 6)
        if got is None:  # declined: an unchanged or binary value, which Python handles
            continue
        assert got == expected
        checked += 1
    assert checked >= 200


def test_an_encoded_row_makes_the_same_envelope_as_its_dict() -> None:
    registry = _registry()
    columns = _columns()
    encoder = row_encoder.native_encoder(columns, registry, [0])
    assert encoder is not None
    convert = row_converter(columns, registry)
    values = ("7", *(cases[0] for *_, cases in COLUMN_CASES))
    encoded = encoder.encode_values(values)
    assert encoded is not None
    row = EncodedRow(encoded[0], values, convert)
    assert encoded[1:] == ({"id": 7}, b'{"id":7}')
    source = SourceInfo("postgresql", "db", "public", "t", 1, 2, 3, "false", 4, {"lsn": 5})
    with_bytes = ChangeEvent(Op.CREATE, {"id": 7}, None, row, source)
    with_dict = ChangeEvent(Op.CREATE, {"id": 7}, None, convert(values), source)
    assert envelope.encode_value(with_bytes, "p", 9) == envelope.encode_value(with_dict, "p", 9)
    assert row == convert(values)  # and it reads back as the same mapping


def _captured_run(fast_path: bool) -> list[ChangeEvent]:
    """The events of the captured session, through the fast path where it applies or not."""
    fixture = Path(__file__).parent / "data" / "pgoutput" / "v1.json"
    messages = [
        (str_to_lsn(at), bytes.fromhex(h))
        for at, _, h in json.loads(fixture.read_text())["messages"]
    ]
    tables = {}
    for _, data in messages:
        message = decode(data)
        if isinstance(message, Relation):
            keys = tuple(c.name for c in message.columns if c.is_key)
            pk = keys if message.replica_identity == "d" else ()
            tables[(message.namespace, message.name)] = TableInfo(
                message.namespace, message.name, message.oid, message.replica_identity, pk
            )
    logger = structlog.get_logger()
    toast = ToastFiller(FakeLog(), logger)  # type: ignore[arg-type]
    asm = Assembler("p", "db", tables, {}, FakeCatalog(), toast, "fail", logger)
    events: list[ChangeEvent] = []
    for lsn, data in messages:
        if not (fast_path and asm.change_from_bytes(data, lsn)):
            asm.handle(decode(data), lsn)
        events += asm.take().events
    return events


def test_the_fast_path_writes_the_records_of_the_python_path() -> None:
    fast_events, python_events = _captured_run(True), _captured_run(False)
    assert len(fast_events) == len(python_events)
    assert sum(e.encoded is not None for e in fast_events) >= 200
    assert all(e.encoded is None for e in python_events)
    for fast_event, python_event in zip(fast_events, python_events, strict=True):
        assert (fast_event.op, fast_event.key, fast_event.source) == (
            python_event.op,
            python_event.key,
            python_event.source,
        )
        after = None if fast_event.after is None else dict(fast_event.after)  # decoded again
        assert envelope.dumps(after) == envelope.dumps(python_event.after)  # (Fragments)
        assert envelope.to_records(fast_event, "p", 5) == envelope.to_records(python_event, "p", 5)


# -- both implementations through the one interface ------------------------------------------


def _implementations(columns: list[RelationColumn], registry: TypeRegistry) -> list[RowEncoder]:
    """The Python encoder, and the Rust one (which completes itself with a Python one)."""
    convert = row_converter(columns, registry)
    python = PythonRowEncoder(convert, [columns[0].name])
    native = row_encoder.native_encoder(columns, registry, [0])
    assert native is not None
    return [
        python,
        row_encoder.RustRowEncoder(native, PythonRowEncoder(convert, [columns[0].name])),
    ]


def _outcome(call: Any, *args: Any) -> Any:
    """A call's result in comparable form, or the type of what it raised."""
    try:
        result = call(*args)
    except Exception as exc:
        return type(exc)
    if isinstance(result, tuple) and len(result) == 4:  # Keyed
        return result[0], envelope.dumps(dict(result[1])), result[2], result[3]
    if isinstance(result, list) and result and isinstance(result[0][0], EncodedRow):  # KeyedRow
        return [(row.json, envelope.dumps(dict(row)), key_json) for row, key_json in result]
    return result


def test_both_encoders_answer_every_captured_tuple_alike() -> None:
    fixture = Path(__file__).parent / "data" / "pgoutput" / "v1.json"
    raw = [bytes.fromhex(data) for _, _, data in json.loads(fixture.read_text())["messages"]]
    relations = {m.oid: m for m in map(decode, raw) if type(m).__name__ == "Relation"}
    registry = TypeRegistry()
    checked = unchanged = 0
    for data in raw:
        message = decode(data)
        if not isinstance(message, Insert) or message.relation_oid not in relations:
            continue
        columns = list(relations[message.relation_oid].columns)  # type: ignore[attr-defined]
        python, rust = _implementations(columns, registry)
        expected = _outcome(python.encode_tuple, data)
        assert _outcome(rust.encode_tuple, data) == expected
        unchanged += expected is None  # an unchanged TOAST value: the fill's, in both
        checked += 1
    assert checked >= 200 and unchanged < checked


def test_both_encoders_answer_bad_tuples_alike() -> None:
    registry = _registry()
    columns = [RelationColumn(True, "id", 20, -1), RelationColumn(False, "t", 25, -1)]
    head = b"I\x00\x00\x00\x07N\x00\x02t\x00\x00\x00\x011"
    tails = [b"u", b"b\x00\x00\x00\x01x", b"t\x00\x00\x00\x02\xff\xfe", b"t\x00\x00\x00\x09short"]
    tails += [b"n", b"t\x00\x00\x00\x01y"]
    python, rust = _implementations(columns, registry)
    for tail in tails:
        assert _outcome(rust.encode_tuple, head + tail) == _outcome(
            python.encode_tuple, head + tail
        )
    assert python.encode_tuple(head + b"u") is None  # unchanged TOAST: for the fill
    bad = b"I\x00\x00\x00\x07N\x00\x02t\x00\x00\x00\x01xn"  # int('x')
    assert _outcome(rust.encode_tuple, bad) is _outcome(python.encode_tuple, bad) is not None


def test_the_encoder_is_chosen_once_and_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    code = (
        "from connectors.postgres.types import row_encoder; "
        "print(row_encoder.IMPLEMENTATION, row_encoder.REASON, "
        "type(row_encoder.row_encoder([], None, [], dict)).__name__)"
    )
    env = {**os.environ, "CDC_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["python", "CDC_NATIVE=0", "PythonRowEncoder"], out.stderr
    with capture_logs() as logs:
        row_encoder.log_selected(structlog.get_logger())
    assert logs == [
        {
            "event": "native.selected",
            "log_level": "info",
            "component": "row_encoder",
            "implementation": row_encoder.IMPLEMENTATION,
            "reason": row_encoder.REASON,
        }
    ]
    assert (row_encoder.IMPLEMENTATION == "rust") == row_encoder.available()
