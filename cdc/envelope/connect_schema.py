"""Kafka Connect schemas, as Debezium's JsonConverter writes them (``schemas.enable: true``).

A record value is then ``{"schema": <envelope schema>, "payload": <envelope>}`` and a key
``{"schema": <key schema>, "payload": <key>}``; a tombstone stays a bare ``null``. The envelope
schema is ``<pipeline>.<schema>.<table>.Envelope`` (version 2) with ``before``/``after`` structs
``….Value``, the connector's ``source`` struct (``io.debezium.connector.postgresql.Source``),
the ``transaction`` struct ``event.block`` and ``op``/``ts_ms``/``ts_us``/``ts_ns``.

Row field schemas come from the connector, which knows the column types (PostgreSQL:
``connectors.postgres.types.connect``); this module only assembles them. Everything is built
once per table version and kept as JSON bytes (:class:`TableSchemas`), never per record.

Key order inside each schema object is the converter's: ``type``, ``fields``/``items``,
``optional``, ``name``, ``version``, ``doc``, ``parameters``, ``default``, ``field``
(tests/debezium/OBSERVED.md). The ``source`` struct is Debezium's: the record's position
travels beside the value (:attr:`cdc.log.base.Record.pos`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

SNAPSHOT_VALUES: Final = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)
_ORDER: Final = ("type", "fields", "items", "optional", "name", "version", "doc", "parameters")
_LAST: Final = ("default", "field")


def ordered(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with its keys in the converter's order (unknown keys before ``default``)."""
    out = {k: schema[k] for k in _ORDER if k in schema}
    out.update((k, v) for k, v in schema.items() if k not in _ORDER and k not in _LAST)
    out.update((k, schema[k]) for k in _LAST if k in schema)
    return out


def named(schema: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A field of a struct: ``schema`` with ``"field": name`` last."""
    out = ordered(schema)
    out.pop("field", None)
    out["field"] = name
    return out


def field_schema(type_: str, field_name: str, optional: bool, **more: Any) -> dict[str, Any]:
    """A struct field of ``type_``, with ``more`` (``name``, ``parameters``...)."""
    return named({"type": type_, "optional": optional, **more}, field_name)


_f = field_schema


def _common_source() -> list[dict[str, Any]]:
    """The fields every Debezium source struct starts with."""
    return [
        _f("string", "version", False),
        _f("string", "connector", False),
        _f("string", "name", False),
        _f("int64", "ts_ms", False),
        _f(
            "string",
            "snapshot",
            True,
            name="io.debezium.data.Enum",
            version=1,
            parameters={"allowed": SNAPSHOT_VALUES},
            default="false",
        ),
        _f("string", "db", False),
        _f("string", "sequence", True),
        _f("int64", "ts_us", True),
        _f("int64", "ts_ns", True),
    ]


#: The fields after ``ts_ns`` of each connector's source struct, by connector name, as the
#: connectors register them (:func:`register_source_fields`): inference uses them for that
#: connector's events that come without schemas of their own.
_SOURCE_FIELDS: dict[str, tuple[dict[str, Any], ...]] = {}


def register_source_fields(connector: str, fields: Sequence[dict[str, Any]]) -> None:
    """Record ``connector``'s source struct fields after ``ts_ns`` (at the connector's import)."""
    _SOURCE_FIELDS[connector] = tuple(fields)


TRANSACTION: Final = named(
    {
        "type": "struct",
        "fields": [
            _f("string", "id", False),
            _f("int64", "total_order", False),
            _f("int64", "data_collection_order", False),
        ],
        "optional": True,
        "name": "event.block",
        "version": 1,
    },
    "transaction",
)


def source_struct(connector: str, tail: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``source`` field: the common fields, then the connector's ``tail`` (Debezium's; the
    record's position travels beside the value, not in it)."""
    return named(
        {
            "type": "struct",
            "fields": [*_common_source(), *tail],
            "optional": False,
            "name": f"io.debezium.connector.{connector}.Source",
            "version": 1,
        },
        "source",
    )


def envelope_schema(
    topic: str, columns: Sequence[Mapping[str, Any]], source: Mapping[str, Any]
) -> dict[str, Any]:
    """The value schema of ``topic``'s change events; ``columns`` are named field schemas."""
    row = {"type": "struct", "fields": list(columns), "optional": True, "name": f"{topic}.Value"}
    return ordered(
        {
            "type": "struct",
            "fields": [
                named(row, "before"),
                named(row, "after"),
                dict(source),
                TRANSACTION,
                _f("string", "op", False),
                _f("int64", "ts_ms", True),
                _f("int64", "ts_us", True),
                _f("int64", "ts_ns", True),
            ],
            "optional": False,
            "name": f"{topic}.Envelope",
            "version": 2,
        }
    )


def key_schema(topic: str, columns: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The key schema of ``topic``: a struct of the key columns' field schemas."""
    return {"type": "struct", "fields": list(columns), "optional": False, "name": f"{topic}.Key"}


@dataclass(frozen=True)
class TableSchemas:
    """A table version's Connect schemas, encoded once.

    Attributes:
        value: the envelope schema's JSON.
        key: the key schema's JSON (``None``: a table without key, keyed ``{}``).
        value_prefix: ``{"schema":<value>,"payload":`` (a value is this, the envelope, ``}``).
    """

    value: bytes
    key: bytes | None
    value_prefix: bytes = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "value_prefix", b'{"schema":%b,"payload":' % self.value)

    @classmethod
    def of(cls, value: Mapping[str, Any], key: Mapping[str, Any] | None) -> TableSchemas:
        return cls(orjson.dumps(value), None if key is None else orjson.dumps(key))

    def wrap_value(self, envelope: bytes) -> bytes:
        """``{"schema", "payload"}`` around an envelope's JSON."""
        return b"%b%b}" % (self.value_prefix, envelope)

    def wrap_key(self, key: bytes) -> bytes:
        """``{"schema", "payload"}`` around a key's JSON (``{}``, a keyless one, gets none)."""
        if self.key is None or key == b"{}":
            return b'{"schema":null,"payload":%b}' % key
        return b'{"schema":%b,"payload":%b}' % (self.key, key)


#: The schemas of the BEGIN/END records on ``<pipeline>.transaction``
#: (``provide.transaction.metadata``), as Debezium 3.6.1 writes them.
TRANSACTION_RECORDS: Final = TableSchemas.of(
    {
        "type": "struct",
        "fields": [
            _f("string", "status", False),
            _f("string", "id", False),
            _f("int64", "event_count", True),
            _f(
                "array",
                "data_collections",
                True,
                items={
                    "type": "struct",
                    "fields": [
                        _f("string", "data_collection", False),
                        _f("int64", "event_count", False),
                    ],
                    "optional": True,
                    "name": "event.collection",
                    "version": 1,
                },
            ),
            _f("int64", "ts_ms", False),
        ],
        "optional": False,
        "name": "io.debezium.connector.common.TransactionMetadataValue",
        "version": 1,
    },
    {
        "type": "struct",
        "fields": [_f("string", "id", False)],
        "optional": False,
        "name": "io.debezium.connector.common.TransactionMetadataKey",
        "version": 1,
    },
)


# -- schemas of sources that do not describe their columns ---------------------------------


def infer(value: Any) -> dict[str, Any]:
    """A field schema for a JSON value, for sources without column types (the generator)."""
    if value is None:
        return {"type": "string", "optional": True}
    if isinstance(value, bool):
        return {"type": "boolean", "optional": True}
    if isinstance(value, int):
        return {"type": "int64", "optional": True}
    if isinstance(value, float):
        return {"type": "double", "optional": True}
    if isinstance(value, list):
        item = infer(value[0]) if value else {"type": "string", "optional": True}
        return {"type": "array", "items": item, "optional": True}
    if isinstance(value, dict):
        return {
            "type": "struct",
            "fields": [named(infer(v), k) for k, v in value.items()],
            "optional": True,
        }
    return {"type": "string", "optional": True}


def inferred_schemas(
    topic: str,
    connector: str,
    row: Mapping[str, Any],
    key: Mapping[str, Any],
    extra: Mapping[str, Any],
    table_fields: bool,
) -> TableSchemas:
    """The schemas of a change of a source without column types, from its values."""
    tail: list[dict[str, Any]] = []
    known = _SOURCE_FIELDS.get(connector) if table_fields else None
    if known:  # the connector registered its source struct
        tail += known
        names = {f["field"] for f in known}
        extra = {k: v for k, v in extra.items() if k not in names}
    elif table_fields:
        tail += [_f("string", "schema", False), _f("string", "table", False)]
        tail.append(_f("int64", "txId", True))
    tail += [named(infer(v), k) for k, v in extra.items()]
    columns = [named(infer(v), k) for k, v in row.items()]
    keys = [named({**infer(v), "optional": False}, k) for k, v in key.items()]
    return TableSchemas.of(
        envelope_schema(topic, columns, source_struct(connector, tail)),
        key_schema(topic, keys) if keys else None,
    )
