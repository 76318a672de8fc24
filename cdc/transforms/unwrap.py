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

A create, update or snapshot read becomes its ``after``. A delete, and the tombstone after it,
follow ``delete.tombstone.handling.mode``: ``tombstone`` (Debezium's default) keeps only the
tombstone; ``drop`` neither; ``rewrite`` the delete as its ``before`` with ``__deleted:
"true"`` (and ``"false"`` on every other row), without the tombstone; ``rewrite-with-tombstone``
both; ``delete-to-tombstone`` the delete as a tombstone. ``add.fields`` copies fields of the
envelope into the row: ``op``, ``ts_ms``, ``ts_us`` and ``ts_ns`` are the envelope's, other bare
names the ``source`` block's (``table``, ``lsn``), and ``source.x`` or ``transaction.x`` name
their block; each is added as ``<prefix><name>`` (``__op``) or ``<prefix><block>_<name>``
(``__source_ts_ms``). A truncate has no row: it passes as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cdc.sink import SinkRecord

DeleteHandling = Literal[
    "tombstone", "drop", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone"
]
_ENVELOPE_FIELDS: Final = frozenset(("op", "ts_ms", "ts_us", "ts_ns"))


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
            block, dot, _ = name.partition(".")
            if dot and block not in ("source", "transaction"):
                raise ValueError(f"{name!r}: a field's block is source or transaction")
        return fields


def unwrap_options(value: Any) -> Any:
    """``unwrap: true`` is Debezium's defaults; ``false``/absent is no unwrapping."""
    if value is True:
        return {}
    if value is False:
        return None
    return value


def unwrap_records(records: Sequence[SinkRecord], options: UnwrapOptions) -> list[SinkRecord]:
    """The flat records of ``records``, in order (a record may become none)."""
    out: list[SinkRecord] = []
    for record in records:
        value = record.value
        if value is None:
            if options.delete_handling in ("tombstone", "rewrite-with-tombstone"):
                out.append(record)
            continue
        op = value.get("op") if isinstance(value, dict) else None
        if op in ("c", "u", "r"):
            out.append(replace(record, value=_row(value, value.get("after"), options, "false")))
        elif op == "d":
            out.extend(_delete(record, value, options))
        else:  # a truncate, or anything that is not a row change
            out.append(record)
    return out


def _delete(record: SinkRecord, value: dict[str, Any], options: UnwrapOptions) -> list[SinkRecord]:
    mode = options.delete_handling
    if mode in ("rewrite", "rewrite-with-tombstone"):
        return [replace(record, value=_row(value, value.get("before"), options, "true"))]
    if mode == "delete-to-tombstone":
        return [replace(record, value=None)]
    return []


def _row(value: dict[str, Any], row: Any, options: UnwrapOptions, deleted: str) -> dict[str, Any]:
    flat = dict(row) if isinstance(row, dict) else {}
    prefix = options.add_fields_prefix
    for name in options.add_fields:
        block, dot, field = name.partition(".")
        if dot:
            inner = value.get(block)
            flat[f"{prefix}{block}_{field}"] = inner.get(field) if isinstance(inner, dict) else None
        elif name in _ENVELOPE_FIELDS:
            flat[prefix + name] = value.get(name)
        else:
            source = value.get("source")
            flat[prefix + name] = source.get(name) if isinstance(source, dict) else None
    if options.delete_handling in ("rewrite", "rewrite-with-tombstone"):
        flat[prefix + "deleted"] = deleted
    return flat
