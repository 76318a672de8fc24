"""Masked columns in the native row encoder write exactly what the Python path writes.

The built-in masks (``hash``, ``redact``, ``null``, ``keep_last``) are computed in Rust; a
``plugin`` mask is a Python call. Differential, as ``tests/unit/test_pg_row_encoder.py`` and
``tests/unit/test_pg_row_encoder_copy.py`` (whose helpers it shares): every value goes through
:func:`~connectors.postgres.types.row_converter` with the masks and orjson, and through the
native encoder, over pgoutput tuples and ``COPY`` lines, and the bytes and key values must be
equal.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from cdc.envelope import encode as envelope
from cdc.transforms.masks import Mask, hash_text
from connectors.postgres.pgoutput import RelationColumn
from connectors.postgres.types import row_converter, row_encoder
from connectors.postgres.types.encoder import NEW_TUPLE_AT, PythonRowEncoder, RowEncoder
from tests.services.common import in_ci
from tests.unit.test_pg_row_encoder import _outcome, _registry
from tests.unit.test_pg_row_encoder_copy import _copy_line

# Outside CI a machine without Rust runs the pure-Python path only; in CI the encoder must exist.
pytestmark = pytest.mark.skipif(
    not row_encoder.available() and not in_ci(),
    reason="the native encoder is not built (no Rust toolchain)",
)

KEY = b"0123456789abcdef-not-a-real-key"


def _reverse(text: str) -> str:
    """A plugin mask: a plain Python function."""
    return text[::-1]


MASKS: dict[str, Mask] = {
    "hash": Mask("hash", key=KEY),
    "redact": Mask("redact"),
    "null": Mask("null"),
    "keep_last_0": Mask("keep_last", n=0),
    "keep_last_4": Mask("keep_last", n=4),
    "keep_last_longer": Mask("keep_last", n=40),
    "keep_last_huge": Mask("keep_last", n=2**70),  # more than the encoder's usize
    "plugin": Mask("plugin", plugin=_reverse),
}
BUILT_IN = [name for name, mask in MASKS.items() if mask.kind != "plugin"]
# Text forms a masked value may have; keep_last counts characters (code points), not bytes,
# and the kept ones may need JSON escaping (or, in a COPY line, COPY's own escapes).
TEXTS: list[str | None] = [
    None,
    "",
    "a",
    "5551234567",
    "alice@example.com",
    'quote " and \\ back',
    'tail "\\',
    "tab\tnew\nline\r\x01\x1f\x7f",
    "ctl\x08\x0c\x1b",
    "ünïcödé ✓ 😀",
    "😀😀😀😀😀😀",
    "\u2028\ufeffé",
]
# Column types a mask may sit on: it takes their text, whatever it is; the type's converter is
# never asked (an int4 column masked with "é" is no error).
MASKED_OIDS = {"text": 25, "int4": 23, "timestamptz": 1184, "text[]": 1009, "float8": 701}
# Unmasked columns of several kinds beside the masked one: text, int, bool, timestamptz,
# numeric, a flat text array.
OTHERS = [("t", 25, 'other "t"'), ("n", 23, "42"), ("b", 16, "t")]
OTHERS += [("ts", 1184, "2024-01-01 00:01:00.5+00"), ("d", 1700, "1.50"), ("a", 1009, "{a,b}")]


def _columns(masked_oid: int = 25) -> list[RelationColumn]:
    """``id`` (the key), ``m`` (the masked column, of ``masked_oid``), then :data:`OTHERS`."""
    columns = [RelationColumn(True, "id", 20, -1), RelationColumn(False, "m", masked_oid, -1)]
    return columns + [RelationColumn(False, name, oid, -1) for name, oid, _ in OTHERS]


def _row(key: str, text: str | None) -> tuple[str | None, ...]:
    return (key, text, *(value for *_, value in OTHERS))


def _reference(
    columns: Sequence[RelationColumn],
    masks: Mapping[str, Mask],
    key: Sequence[str],
    values: tuple[str | None, ...],
) -> tuple[bytes, dict[str, Any], bytes]:
    """Row JSON, key and key JSON as the Python path writes them."""
    row = row_converter(columns, _registry(), masks)(values)
    key_dict = {name: row[name] for name in key}
    return envelope.dumps(row), key_dict, envelope.encode_key(key_dict)


def _encoder(columns: Sequence[RelationColumn], masks: Mapping[str, Mask], key: list[int]) -> Any:
    encoder = row_encoder.native_encoder(columns, _registry(), key, masks)
    assert encoder is not None
    return encoder


def _insert(values: Sequence[str | None]) -> bytes:
    """An Insert into relation 7 of the text values (pgoutput's TupleData)."""
    data = b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">H", len(values))
    for value in values:
        if value is None:
            data += b"n"
        else:
            text = value.encode()
            data += b"t" + struct.pack(">I", len(text)) + text
    return data


def _implementations(
    columns: list[RelationColumn], masks: Mapping[str, Mask], key: list[int]
) -> list[RowEncoder]:
    """The Python encoder, and the Rust one (completed by a Python one), as a relation has."""
    names = [columns[i].name for i in key]
    convert = row_converter(columns, _registry(), masks)
    rust = row_encoder.row_encoder(columns, _registry(), key, convert, masks)
    assert isinstance(rust, row_encoder.RustRowEncoder)
    return [PythonRowEncoder(convert, names), rust]


@pytest.mark.parametrize("masked_type", list(MASKED_OIDS))
@pytest.mark.parametrize("mask", list(MASKS))
def test_every_mask_over_tuples_gives_the_python_bytes(mask: str, masked_type: str) -> None:
    columns = _columns(MASKED_OIDS[masked_type])
    masks = {"m": MASKS[mask]}
    encoder = _encoder(columns, masks, [0])
    for text in TEXTS:
        values = _row("7", text)
        expected = _reference(columns, masks, ["id"], values)
        assert encoder.encode_values(values) == expected, text
        assert encoder.encode_tuple(_insert(values), NEW_TUPLE_AT) == expected, text


def test_null_is_null_under_every_mask_and_the_null_mask_always_null() -> None:
    columns = _columns()
    for name, mask in MASKS.items():
        row, *_ = _encoder(columns, {"m": mask}, [0]).encode_values(_row("1", None))
        assert row.startswith(b'{"id":1,"m":null,'), name
    row, *_ = _encoder(columns, {"m": MASKS["null"]}, [0]).encode_values(_row("1", "x"))
    assert row.startswith(b'{"id":1,"m":null,')


def test_the_masks_values() -> None:
    columns = _columns()
    written = {
        name: _encoder(columns, {"m": MASKS[name]}, [0]).encode_values(_row("1", text))[0]
        for name, text in [("hash", "é"), ("redact", "x"), ("keep_last_4", '😀ab"\\c\n')]
    }
    assert written["hash"].startswith(b'{"id":1,"m":"%s",' % hash_text(KEY, "é").encode())
    assert written["redact"].startswith(b'{"id":1,"m":"***",')
    assert written["keep_last_4"].startswith(b'{"id":1,"m":"***\\"\\\\c\\n",')


@pytest.mark.parametrize("mask", list(MASKS))
def test_every_mask_over_copy_lines_gives_the_python_records(mask: str) -> None:
    columns = _columns()
    masks = {"m": MASKS[mask]}
    encoder = _encoder(columns, masks, [0])
    rows = [_row(str(n), text) for n, text in enumerate(TEXTS)]
    lines = [_copy_line(values) for values in rows]
    records = encoder.copy_records(lines, b"<", b"|", b">", 10)
    pairs = encoder.copy_rows(lines)
    for sequence, (values, line) in enumerate(zip(rows, lines, strict=True), 10):
        record, pair = records[sequence - 10], pairs[sequence - 10]
        if b"\\" in line.replace(b"\\N", b""):  # COPY's escapes: the Python path splits it
            assert record is None and pair is None
            continue
        row_json, _, key_json = _reference(columns, masks, ["id"], values)
        assert record == (key_json, b"<%b|>" % row_json)  # the sequence: beside the value
        assert pair == (key_json, row_json)


@pytest.mark.parametrize("mask", list(MASKS))
def test_both_encoders_answer_masked_tuples_and_copy_lines_alike(mask: str) -> None:
    columns = _columns()
    python, rust = _implementations(columns, {"m": MASKS[mask]}, [0])
    rows = [_row(str(n), text) for n, text in enumerate(TEXTS)]
    for values in rows:
        message = _insert(values)
        assert _outcome(rust.encode_tuple, message) == _outcome(python.encode_tuple, message)
    lines = [_copy_line(values) for values in rows]  # escaped lines included: declined
    template = envelope.RecordTemplate(b"<", b"|", b"(", b"[", b"]", b">")
    args = (lines, template, b'"s"', b"}", 5, 3 << 32)
    assert _outcome(rust.copy_records, *args) == _outcome(python.copy_records, *args)
    assert _outcome(rust.copy_rows, lines) == _outcome(python.copy_rows, lines)


def test_a_hashed_key_column_gives_the_python_key() -> None:
    columns = [
        RelationColumn(True, "id", 20, -1),
        RelationColumn(True, "email", 25, -1),
        RelationColumn(False, "name", 25, -1),
    ]
    masks = {"email": MASKS["hash"]}
    encoder = _encoder(columns, masks, [1, 0])
    python, rust = _implementations(columns, masks, [1, 0])
    for email in ["alice@example.com", 'ünï "q" 😀', "", None]:
        values = ("7", email, "Alice")
        expected = _reference(columns, masks, ["email", "id"], values)
        got = encoder.encode_tuple(_insert(values), NEW_TUPLE_AT)
        assert got == expected
        assert list(got[1]) == ["email", "id"]  # key order
        assert got[1]["email"] == (None if email is None else hash_text(KEY, email))
        row_json, _, key_json = expected
        line = _copy_line(values)
        assert encoder.copy_records([line], b"", b"", b"", 0) == [(key_json, row_json)]
        assert encoder.copy_rows([line]) == [(key_json, row_json)]
        message = _insert(values)
        assert _outcome(rust.encode_tuple, message) == _outcome(python.encode_tuple, message)


def test_random_masked_rows_give_the_python_bytes() -> None:
    rng = random.Random(17)
    alphabet = [chr(c) for c in range(1, 0x80)] + ["é", "✓", "😀", "\u2028", "\ufeff", "ß"]
    names = list(MASKS)
    for _ in range(200):
        columns = [RelationColumn(True, "id", 20, -1)]
        columns += [
            RelationColumn(False, f"c{i}", rng.choice([25, 23, 1009]), -1) for i in range(5)
        ]
        masks = {c.name: MASKS[rng.choice(names)] for c in columns[1:] if rng.random() < 0.8}
        encoder = _encoder(columns, masks, [0])
        for n in range(10):
            values = (
                str(n),
                *(
                    None
                    if rng.random() < 0.1
                    else "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
                    for _ in range(5)
                ),
            )
            expected: Any
            try:
                expected = _reference(columns, masks, ["id"], values)
            except Exception as exc:  # an unmasked int4 or array column rejects the text
                expected = type(exc)
            got = _outcome(encoder.encode_values, values)
            if isinstance(expected, type):
                assert got is None or isinstance(got, type)
            else:
                assert got == expected, (values, masks)


@dataclasses.dataclass(frozen=True, slots=True)
class _Uncallable(Mask):
    """A built-in mask whose Python call fails: the native encoder must not make it."""

    def __call__(self, text: str) -> Any:
        raise AssertionError("a built-in mask was called through Python")


def test_built_in_masks_are_written_without_python() -> None:
    columns = _columns()
    plain = {"m": MASKS["hash"], "t": MASKS["keep_last_4"], "a": MASKS["redact"]}
    plain |= {"d": MASKS["null"]}
    uncallable = {name: _Uncallable(m.kind, m.n, m.key) for name, m in plain.items()}
    encoder = _encoder(columns, uncallable, [0])
    assert encoder.python_columns is False  # copy_records releases the interpreter lock
    rows = [_row(str(n), text) for n, text in enumerate(TEXTS)]
    lines = [_copy_line(values) for values in rows]
    unescaped = [b"\\" not in line.replace(b"\\N", b"") for line in lines]
    assert sum(unescaped) >= 8
    rows = [values for values, plain_line in zip(rows, unescaped, strict=True) if plain_line]
    records = encoder.copy_records([_copy_line(values) for values in rows], b"", b"", b"", 0)
    for values, record in zip(rows, records, strict=True):
        row_json, _, key_json = _reference(columns, plain, ["id"], values)
        assert record == (key_json, row_json)
    for values in rows:
        encoded = encoder.encode_tuple(_insert(values), NEW_TUPLE_AT)
        assert encoded == _reference(columns, plain, ["id"], values)


def test_a_plugin_mask_or_a_python_type_keeps_the_lock() -> None:
    columns = _columns()
    assert _encoder(columns, {"m": MASKS["plugin"]}, [0]).python_columns is True
    assert _encoder(_columns(701), {}, [0]).python_columns is True  # float8: Python's
    assert _encoder(_columns(701), {"m": MASKS["hash"]}, [0]).python_columns is False
    assert _encoder(columns, {}, [0]).python_columns is False
