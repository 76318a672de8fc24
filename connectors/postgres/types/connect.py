"""Each column's Kafka Connect field schema, as Debezium 3.6.1's PostgreSQL connector gives it
and the JsonConverter writes it (``tests/debezium/expected/*.jsonl``).

Keys come in the converter's order: ``type``, ``fields``/``items``, ``optional``, ``name``,
``version``, ``doc``, ``parameters``, ``default``, ``field``. Built once per table version by
the envelope's schema (SHAPE), never per record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from cdc.envelope.options import EnvelopeOptions
from connectors.postgres.types.decimals import numeric_scale
from connectors.postgres.types.modes import time_precision

if TYPE_CHECKING:
    from connectors.postgres.types.registry import TypeRegistry

__all__ = ["column_schema"]

Schema = dict[str, Any]

_PLAIN: Final[dict[int, str]] = {
    16: "boolean", 20: "int64", 21: "int16", 23: "int32", 26: "int64", 700: "float",
    701: "double",
}  # fmt: skip
_NAMED_STRINGS: Final[dict[int, str]] = {
    2950: "io.debezium.data.Uuid",
    114: "io.debezium.data.Json",
    3802: "io.debezium.data.Json",
    142: "io.debezium.data.Xml",
    1266: "io.debezium.time.ZonedTime",
    1184: "io.debezium.time.ZonedTimestamp",
}
_DATE: Final = {
    "isostring": ("string", "io.debezium.time.IsoDate"),
    "connect": ("int32", "org.apache.kafka.connect.data.Date"),
}
_VARIABLE_DECIMAL: Final[list[Schema]] = [
    {"type": "int32", "optional": False, "field": "scale"},
    {"type": "bytes", "optional": False, "field": "value"},
]


def _named(kind: str, name: str, **extra: Any) -> Schema:
    return {"type": kind, "optional": True, "name": name, "version": 1, **extra}


def _decimal(typmod: int, mode: str) -> Schema:
    if mode != "precise":
        return {"type": "string" if mode == "string" else "double", "optional": True}
    precision_scale = numeric_scale(typmod)
    if precision_scale is None:
        schema = _named("struct", "io.debezium.data.VariableScaleDecimal")
        return {
            "type": "struct",
            "fields": [dict(f) for f in _VARIABLE_DECIMAL],
            **{k: v for k, v in schema.items() if k != "type"},
            "doc": "Variable scaled decimal",
        }
    precision, scale = precision_scale
    parameters = {"scale": str(scale), "connect.decimal.precision": str(precision)}
    return _named("bytes", "org.apache.kafka.connect.data.Decimal", parameters=parameters)


def _time(typmod: int, mode: str) -> Schema:
    precision = time_precision(typmod)
    if mode == "isostring":
        return _named("string", "io.debezium.time.IsoTime")
    if mode == "connect":
        return _named("int32", "org.apache.kafka.connect.data.Time")
    if mode == "adaptive" and 0 <= precision <= 3:
        return _named("int32", "io.debezium.time.Time")
    return _named("int64", "io.debezium.time.MicroTime")


def _timestamp(typmod: int, mode: str) -> Schema:
    if mode == "isostring":
        return _named("string", "io.debezium.time.IsoTimestamp")
    if mode == "connect":
        return _named("int64", "org.apache.kafka.connect.data.Timestamp")
    if 0 <= time_precision(typmod) <= 3:
        return _named("int64", "io.debezium.time.Timestamp")
    return _named("int64", "io.debezium.time.MicroTimestamp")


def _builtin(oid: int, typmod: int, options: EnvelopeOptions) -> Schema:
    """The schema of a built-in base type (``optional`` true, no ``field``)."""
    if oid in _PLAIN:
        return {"type": _PLAIN[oid], "optional": True}
    if oid in _NAMED_STRINGS:
        return _named("string", _NAMED_STRINGS[oid])
    mode = options.time_precision_mode
    if oid == 1700:
        return _decimal(typmod, options.decimal_handling_mode)
    if oid == 790:  # money: a decimal of scale 2 (money.fraction.digits)
        if options.decimal_handling_mode == "precise":
            return _named(
                "bytes", "org.apache.kafka.connect.data.Decimal", parameters={"scale": "2"}
            )
        return _decimal(typmod, options.decimal_handling_mode)
    if oid == 17:
        binary = "bytes" if options.binary_handling_mode == "bytes" else "string"
        return {"type": binary, "optional": True}
    if oid == 1082:
        kind, name = _DATE.get(mode, ("int32", "io.debezium.time.Date"))
        return _named(kind, name)
    if oid == 1083:
        return _time(typmod, mode)
    if oid == 1114:
        return _timestamp(typmod, mode)
    if oid == 1186:
        if options.interval_handling_mode == "string":
            return _named("string", "io.debezium.time.Interval")
        return _named("int64", "io.debezium.time.MicroDuration")
    return {"type": "string", "optional": True}  # text, varchar, inet... (their text)


def _type_schema(oid: int, typmod: int, options: EnvelopeOptions, registry: TypeRegistry) -> Schema:
    entry = registry.resolved(oid)
    typmod = registry.base_typmod(oid, typmod)
    if entry is None:
        return {"type": "string", "optional": True}
    if entry.kind == "array":
        items = _type_schema(entry.element_oid, typmod, options, registry)
        return {"type": "array", "items": items, "optional": True}
    if entry.kind == "enum":
        return _named(
            "string", "io.debezium.data.Enum", parameters={"allowed": ",".join(entry.labels)}
        )
    if entry.kind == "base" and entry.namespace == "pg_catalog":
        return _builtin(entry.oid, typmod, options)
    if entry.kind == "base" and entry.name == "hstore":
        if options.hstore_handling_mode == "json":
            return _named("string", "io.debezium.data.Json")
        values = {"type": "string", "optional": True}
        return {"type": "map", "keys": {"type": "string", "optional": False}, "values": values,
                "optional": True}  # fmt: skip
    return {"type": "string", "optional": True}


def column_schema(
    type_oid: int,
    typmod: int,
    name: str,
    optional: bool,
    options: EnvelopeOptions,
    registry: TypeRegistry,
) -> Schema:
    """The Connect field schema of one column: its type's schema, ``optional`` (not for a key
    or ``NOT NULL`` column), and ``field`` last.

    The registry must know the column's type (the source loads it from the catalog first);
    an unknown type is a ``string`` (its text).
    """
    schema = _type_schema(type_oid, typmod, options, registry)
    schema["optional"] = optional
    schema["field"] = name
    return schema
