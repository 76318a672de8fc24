"""``unwrap``: Debezium's ``ExtractNewRecordState`` for a sink that wants flat rows.

A sink-side option (the jsonl sink's ``unwrap:``): the log keeps whole change events, and the
sink writes each record's row state instead, under Debezium's option names::

    sinks:
      - name: flat
        type: jsonl
        path: out/flat
        unwrap:
          delete.tombstone.handling.mode: rewrite   # tombstone | drop | rewrite |
                                                    # rewrite-with-tombstone | delete-to-tombstone
          add.fields: op,source.ts_ms               # -> __op, __source_ts_ms
          add.fields.prefix: __

As Debezium 3.x does (``DefaultDeleteHandlingStrategy``): a create, update or snapshot read
becomes its ``after``. A delete, and the tombstone after it, follow
``delete.tombstone.handling.mode``:

* ``tombstone`` (the default) and ``delete-to-tombstone``: the delete becomes a tombstone (its
  key, a null value) and the tombstone after it is dropped, so each delete leaves exactly one
  tombstone, with ``tombstones.on.delete`` on or off;
* ``drop``: neither is kept;
* ``rewrite``: the delete becomes its ``before`` with ``__deleted: "true"`` (``"false"`` on
  every other row), and the tombstone is dropped; ``rewrite-with-tombstone`` keeps it.

A delete without ``before`` (MongoDB without pre-images) is rewritten from its key. A truncate
has no row: it is dropped, as Debezium drops it. A record that is no change event (no ``op``)
passes as it is. A row written as JSON text (MongoDB's documents) is parsed.

``add.fields`` copies fields of the envelope into the row, after ``__deleted``: ``op``,
``ts_ms``, ``ts_us`` and ``ts_ns`` are the envelope's, ``id``, ``total_order`` and
``data_collection_order`` the ``transaction`` block's, other bare names the ``source``
block's (``table``, ``lsn``); ``source.x``, ``transaction.x`` or ``updateDescription.x`` name
the block. Each is added as ``<prefix><name>`` (``__op``), ``<prefix><block>_<name>``
(``__source_ts_ms``), or ``<prefix><new>`` for ``name:new`` (``source.ts_ms:event_ts`` ->
``__event_ts``). As Debezium's code does (its documentation says otherwise), a field the
event lacks is not added; a field of a null block (``transaction`` without transaction
metadata) is added as null.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from cdc.contracts.sink import SinkRecord

DeleteHandling = Literal[
    "tombstone", "drop", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone"
]
_ENVELOPE_FIELDS: Final = frozenset(("op", "ts_ms", "ts_us", "ts_ns"))
_TRANSACTION_FIELDS: Final = frozenset(("id", "total_order", "data_collection_order"))
_BLOCKS: Final = frozenset(("source", "transaction", "updateDescription"))
_REWRITES: Final = frozenset(("rewrite", "rewrite-with-tombstone"))
_KEEP_TOMBSTONES: Final = frozenset(("rewrite-with-tombstone",))
_ROW_OPS: Final = frozenset(("c", "u", "r"))
_ABSENT: Final = object()


@dataclass(frozen=True, slots=True)
class AddedField:
    """One ``add.fields`` entry: where the value is and the row field it becomes."""

    block: str | None  # None: the envelope itself
    field: str
    name: str

    @classmethod
    def parse(cls, entry: str, prefix: str) -> AddedField:
        """``op``, ``source.ts_ms`` or ``source.ts_ms:new_name`` as Debezium reads it.

        Raises:
            ValueError: more than one ``:``, an unknown block, or an empty name.
        """
        path, colon, new = (part.strip() for part in entry.partition(":"))
        if ":" in new or (colon and not new) or not path:
            raise ValueError(f"{entry!r}: write field, block.field or field:new_name")
        named, dot, field = path.partition(".")
        if not dot:
            return cls(_block_of(path), path, prefix + (new or path))
        if named not in _BLOCKS or not field:
            raise ValueError(
                f"{entry!r}: a field's block is source, transaction or updateDescription"
            )
        return cls(named, field, prefix + (new or f"{named}_{field}"))

    def lookup(self, envelope: dict[str, Any]) -> tuple[bool, Any]:
        """``(found, value)`` of the field in ``envelope``.

        A field of a block that is null (``transaction`` without transaction metadata) is
        found, as null; a field neither the block nor the envelope itself has (Debezium looks
        there too, for a field another step put there) is not found.
        """
        if self.block is not None:
            inner = envelope.get(self.block, _ABSENT)
            if isinstance(inner, dict) and self.field in inner:
                return True, inner[self.field]
            if inner is None:
                return True, None
        if self.field in envelope:
            return True, envelope[self.field]
        return False, None


def _block_of(field: str) -> str | None:
    if field in _ENVELOPE_FIELDS:
        return None
    return "transaction" if field in _TRANSACTION_FIELDS else "source"


class UnwrapOptions(BaseModel):
    """The options of ``ExtractNewRecordState``, under its property names."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    delete_handling: DeleteHandling = Field(
        "tombstone", validation_alias="delete.tombstone.handling.mode"
    )
    add_fields: tuple[str, ...] = Field((), validation_alias="add.fields")
    add_fields_prefix: str = Field("__", validation_alias="add.fields.prefix")

    @field_validator("add_fields", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("add_fields")
    @classmethod
    def _known_blocks(cls, fields: tuple[str, ...]) -> tuple[str, ...]:
        for name in fields:
            AddedField.parse(name, "")
        return fields

    def added(self) -> tuple[AddedField, ...]:
        """The ``add.fields`` entries, parsed."""
        return tuple(AddedField.parse(f, self.add_fields_prefix) for f in self.add_fields)


def unwrap_options(value: Any) -> Any:
    """``unwrap: true`` is Debezium's defaults; ``false``/absent is no unwrapping."""
    if value is True:
        return {}
    if value is False:
        return None
    return value


def unwrap_records(records: Sequence[SinkRecord], options: UnwrapOptions) -> list[SinkRecord]:
    """The flat records of ``records``, in order (a record may become none)."""
    added = options.added()
    mode = options.delete_handling
    out: list[SinkRecord] = []
    for record in records:
        value = record.value
        if value is None:
            if mode in _KEEP_TOMBSTONES:
                out.append(record)
            continue
        op = value.get("op")
        if op in _ROW_OPS:
            row = _row(value.get("after"), record)
            out.append(replace(record, value=_flat(row, value, added, mode, "false")))
        elif op == "d":
            out.extend(_delete(record, value, added, mode))
        elif op is None:  # not a change event: nothing to unwrap
            out.append(record)
        # A truncate has no row state: dropped, as Debezium drops it.
    return out


def _delete(
    record: SinkRecord, value: dict[str, Any], added: tuple[AddedField, ...], mode: str
) -> list[SinkRecord]:
    if mode in _REWRITES:
        row = _row(value.get("before"), record)
        return [replace(record, value=_flat(row, value, added, mode, "true"))]
    if mode == "drop":
        return []
    return [replace(record, value=None)]  # tombstone, delete-to-tombstone


def _row(row: Any, record: SinkRecord) -> dict[str, Any]:
    """A row image as a dict: JSON text parsed; a missing one (a delete without ``before``)
    is the record's key, all there is of it."""
    if isinstance(row, str):
        try:
            row = orjson.loads(row)
        except orjson.JSONDecodeError:
            return {"value": row}
    if isinstance(row, dict):
        return dict(row)
    return dict(record.key or {}) if row is None else {"value": row}


def _flat(
    row: dict[str, Any],
    envelope: dict[str, Any],
    added: tuple[AddedField, ...],
    mode: str,
    deleted: str,
) -> dict[str, Any]:
    if mode in _REWRITES:
        row["__deleted"] = deleted
    for field in added:
        found, value = field.lookup(envelope)
        if found:
            row[field.name] = value
    return row
