"""Row JSON for the envelope: rows a source already wrote (:class:`EncodedRow`) and the
encoding rules for the few Python types orjson does not serialise itself (exact decimals,
base64 bytes).

Split from :mod:`cdc.envelope.encode` (which re-exports all of it) so that
:mod:`cdc.envelope.template` can use it without importing the envelope.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any

import orjson

from cdc.contracts.events import Row


class EncodedRow(Mapping[str, Any]):
    """A row whose JSON the source already wrote (a native encoder); the envelope embeds the
    bytes as they are, and the values are worked out only if something reads them.

    Args:
        json: the row as a JSON object, exactly as ``orjson.dumps`` of its values would write.
        raw: what ``decode`` turns into the row's values (a tuple, the message bytes).
        decode: ``raw`` -> the row dict, on first access.
    """

    __slots__ = ("_decode", "_raw", "_values", "json")

    def __init__(self, json: bytes, raw: Any, decode: Callable[[Any], Row]) -> None:
        self.json = json
        self._raw = raw
        self._decode = decode
        self._values: Row | None = None

    @classmethod
    def of(cls, json: bytes, values: Row) -> EncodedRow:
        """A row whose values are known already (the Python encoder's)."""
        row = cls(json, None, _no_decode)
        row._values = values
        return row

    @property
    def raw(self) -> Any:
        """What the row's values are decoded from (``None`` for :meth:`of` rows)."""
        return self._raw

    def values_dict(self) -> Row:
        """The row's values (decoded once)."""
        values = self._values
        if values is None:
            values = self._values = self._decode(self._raw)
        return values

    def __getitem__(self, name: str) -> Any:
        return self.values_dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values_dict())

    def __len__(self) -> int:
        return len(self.values_dict())

    def __repr__(self) -> str:
        return f"EncodedRow({self.json!r})"


#: Edits a row's values: the row dict in, the edited row dict out (a transform's work).
RowEdit = Callable[[dict[str, Any]], dict[str, Any]]
#: A connector's way to edit one of its rows, keeping the row in its own form.
RowEditor = Callable[[Mapping[str, Any], RowEdit], Mapping[str, Any]]
_EDITORS: dict[str, RowEditor] = {}


def register_row_editor(connector: str, editor: RowEditor) -> None:
    """Say how ``connector``'s rows are edited (at the connector's import). A connector whose
    rows are not JSON objects of their values needs one: MongoDB's are documents written as
    Extended JSON text, which must stay such text when a transform renames or adds a field."""
    _EDITORS[connector] = editor


def edit_row(row: Mapping[str, Any] | None, connector: str, edit: RowEdit) -> Any:
    """``row`` with ``edit`` applied to its values, in the connector's form (``None`` stays
    ``None``); a row the source wrote already (:class:`EncodedRow`) is decoded first."""
    if row is None:
        return None
    editor = _EDITORS.get(connector)
    if editor is not None:
        return editor(row, edit)
    values = row.values_dict() if isinstance(row, EncodedRow) else row
    return edit(dict(values))


def _no_decode(raw: Any) -> Row:
    raise AssertionError("an EncodedRow.of row has its values")


def json_default(value: Any) -> Any:
    if value.__class__ is EncodedRow:  # the source wrote its JSON already
        return orjson.Fragment(value.json)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(value: Any) -> bytes:
    """JSON-encode with the envelope's rules (exact decimals, base64 bytes)."""
    return orjson.dumps(value, default=json_default)


def encode_key(key: dict[str, Any]) -> bytes:
    """The record key: a JSON object of the primary-key columns, in key order."""
    return exact(orjson.dumps(key, default=json_default))


def exact(data: bytes) -> bytes:
    """``data`` in a bytes object of its own size.

    orjson (3.12 and later) hands back even a 10-byte document in a 4 KiB buffer. That is
    harmless for a value used once, but record keys and values wait in batches, and a watermark
    window keeps its chunk's keys, so a 50,000-row chunk held 400 MB more than its data.
    """
    return memoryview(data).tobytes()


def row_json(row: Any) -> bytes:
    """A row's JSON: the source's own for an :class:`EncodedRow`, else encoded now."""
    if row is None:
        return b"null"
    if row.__class__ is EncodedRow:
        json: bytes = row.json
        return json
    return orjson.dumps(row, default=json_default)


def json_of(value: Any) -> bytes:
    """``value`` as JSON, an int without a trip through orjson."""
    if value.__class__ is int:
        return b"%d" % value
    return orjson.dumps(value, default=json_default)


_default = json_default
