"""The pipeline's ``envelope:`` block: Debezium's converter options, under Debezium's own names.

A user moving from Debezium copies the properties over (``time.precision.mode: adaptive``), and
the records then equal what Debezium 3.x writes under the same settings. New pipelines default
to the readable settings (exact decimal strings, ISO-8601 times and intervals, base64 bytes,
no Connect schemas), which Debezium also offers; :data:`DEBEZIUM_DEFAULTS` is Debezium's own
defaults, for a consumer that expects exactly those.

Which options change how a record is written (:meth:`EnvelopeOptions.encoding`) is stored with
the log, so one topic never silently mixes two encodings.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cdc.contracts.events import Op

TimePrecision = Literal["adaptive", "adaptive_time_microseconds", "connect", "isostring"]
DecimalHandling = Literal["precise", "string", "double"]
IntervalHandling = Literal["numeric", "string"]
BinaryHandling = Literal["bytes", "base64", "base64-url-safe", "hex"]
HstoreHandling = Literal["json", "map"]

_SKIPPABLE: Final = {"c": Op.CREATE, "u": Op.UPDATE, "d": Op.DELETE, "t": Op.TRUNCATE}


def _option(default: Any, name: str) -> Any:
    # Read and written under Debezium's dotted name, which is not a Python identifier; the
    # attribute has the snake_case one.
    return Field(default, validation_alias=name, serialization_alias=name)


class EnvelopeOptions(BaseModel):
    """How change events become record values (and keys), as Debezium's options name it.

    Attributes (by their YAML names):
        time.precision.mode: ``date``/``time``/``timestamp`` values: ``adaptive`` (epoch days,
            ms or µs by the column's precision), ``adaptive_time_microseconds`` (as adaptive,
            ``time`` always µs), ``connect`` (Kafka Connect's Date/Time/Timestamp, ms), or
            ``isostring`` (ISO-8601 strings ending in ``Z``).
        decimal.handling.mode: ``numeric``: ``precise`` (Connect's Decimal: base64 of the
            unscaled value, with the scale in the schema), ``string`` or ``double``.
        interval.handling.mode: ``numeric`` (µs, a month being 30.4375 days) or ``string``
            (``P1Y2M3DT4H5M6.789S``).
        binary.handling.mode: ``bytea``: ``bytes`` (base64 in JSON, schema ``bytes``),
            ``base64``, ``base64-url-safe`` or ``hex`` (strings).
        hstore.handling.mode: ``json`` (a JSON text) or ``map``.
        skipped.operations: operations not written, a comma list of ``c``, ``u``, ``d``, ``t``,
            or ``none``.
        tombstones.on.delete: a delete is followed by a tombstone (compaction needs it).
        provide.transaction.metadata: each record carries a ``transaction`` block, and each
            transaction's BEGIN and END go to the ``<pipeline>.transaction`` topic.
        schemas.enable: the JsonConverter's ``{"schema", "payload"}`` for keys and values.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    time_precision_mode: TimePrecision = _option("isostring", "time.precision.mode")
    decimal_handling_mode: DecimalHandling = _option("string", "decimal.handling.mode")
    interval_handling_mode: IntervalHandling = _option("string", "interval.handling.mode")
    binary_handling_mode: BinaryHandling = _option("base64", "binary.handling.mode")
    hstore_handling_mode: HstoreHandling = _option("json", "hstore.handling.mode")
    skipped_operations: str = _option("none", "skipped.operations")
    tombstones_on_delete: bool = _option(True, "tombstones.on.delete")
    provide_transaction_metadata: bool = _option(False, "provide.transaction.metadata")
    schemas_enable: bool = _option(False, "schemas.enable")

    @field_validator("skipped_operations", mode="before")
    @classmethod
    def _operations(cls, value: Any) -> str:
        if isinstance(value, list | tuple):  # YAML [t, d]: the same as "t,d"
            value = ",".join(str(v) for v in value)
        if not isinstance(value, str):
            raise ValueError("must be a comma list of c, u, d, t, or none")
        names = [part.strip() for part in value.split(",") if part.strip()]
        if names == ["none"]:
            return "none"
        unknown = [name for name in names if name not in _SKIPPABLE]
        if unknown or not names:
            raise ValueError(
                f"unknown operation {', '.join(unknown) or repr(value)}: "
                "use a comma list of c, u, d, t, or none"
            )
        return ",".join(sorted(set(names), key="cudt".index))

    @property
    def skipped(self) -> frozenset[Op]:
        """The operations not written to the log."""
        if self.skipped_operations == "none":
            return frozenset()
        return frozenset(_SKIPPABLE[name] for name in self.skipped_operations.split(","))

    def encoding(self) -> dict[str, Any]:
        """The options that decide how a record is written, under their Debezium names.

        Stored with the log: a topic written under one encoding is not appended to under
        another without an explicit decision. ``skipped.operations`` and
        ``tombstones.on.delete`` choose which records exist, not how they are written.
        """
        return self.model_dump(
            by_alias=True, exclude={"skipped_operations", "tombstones_on_delete"}
        )

    def properties(self) -> dict[str, Any]:
        """Every option under its Debezium name, as a user would write it."""
        return self.model_dump(by_alias=True)


READABLE: Final = EnvelopeOptions.model_validate({})
"""The defaults of a new pipeline: Debezium's readable settings."""

DEBEZIUM_DEFAULTS: Final = EnvelopeOptions.model_validate(
    {
        "time.precision.mode": "adaptive",
        "decimal.handling.mode": "precise",
        "interval.handling.mode": "numeric",
        "binary.handling.mode": "bytes",
        "skipped.operations": "t",
        "schemas.enable": True,
    }
)
"""Debezium 3.x's own defaults (with the JsonConverter's ``schemas.enable: true``)."""
