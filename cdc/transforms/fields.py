"""``rename_fields`` and ``add_field``: reshape the rows of the tables ``match`` accepts.

::

    transforms:
      - {type: rename_fields, match: "public\\\\.users", fields: {email: contact_email}}
      - {type: add_field, field: region, value: eu}                  # a constant
      - {type: add_field, field: origin_table, source: table}        # from the change's source

Both work on ``before`` and ``after`` (and a renamed key column in the key too) and on the
published shape, so sinks create the renamed or added column. ``add_field``'s ``source`` is one
of ``op``, ``table`` (``schema.table``) or ``source.<field>``: a field of the envelope's
``source`` block as the record has it (``source.name`` is the pipeline, ``source.db``,
``source.ts_ms``, ``source.lsn``...; null where the block has no such field). Renaming a
column onto the name of another one the table keeps is refused (a transform error: one of
the two values would be lost). A value that changes from change to change (``op``,
times, positions) is not what a row read now would get, so ``cdc verify`` reports the tables
of such a field as not verifiable.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from pydantic import Field, model_validator

from cdc.contracts.events import ChangeEvent, Op
from cdc.contracts.schema import Column, TableSchema
from cdc.envelope.json_rows import edit_row
from cdc.envelope.template import source_block
from cdc.transforms.base import (
    BaseTransform,
    Matcher,
    MatchingConfig,
    TransformContext,
    topic_table_id,
)
from cdc.transforms.connect import renamed, with_field

_FIELD = r"^[A-Za-z_][A-Za-z0-9_]*$"
#: ``source.<field>`` values that are the same for a row whichever change wrote it.
_STABLE_SOURCE = frozenset(("version", "connector", "name", "db", "schema", "table", "collection"))
_NUMERIC_SOURCE = frozenset(("ts_ms", "ts_us", "ts_ns", "txId", "lsn", "xmin", "ord"))


class RenameFieldsConfig(MatchingConfig):
    """``fields``: old name -> new name."""

    type: Literal["rename_fields"] = "rename_fields"
    fields: dict[str, str] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> RenameFieldsConfig:
        targets = list(self.fields.values())
        if len(set(targets)) != len(targets):
            raise ValueError("two fields are renamed to the same name")
        return self


class RenameFields(BaseTransform):
    """The ``rename_fields`` transform (see the module docstring)."""

    def __init__(self, config: RenameFieldsConfig) -> None:
        self._matches = Matcher(config.match)
        self._names = dict(config.fields)
        self._pairs = tuple(sorted(self._names.items()))

    def _rename(self, row: dict[str, Any]) -> dict[str, Any]:
        names = self._names
        out = {names.get(name, name): value for name, value in row.items()}
        if len(out) != len(row):
            raise ValueError(_collision(list(row), names))
        return out

    def apply(self, event: ChangeEvent) -> ChangeEvent:
        if not self._matches(topic_table_id(event)):
            return event
        connector = event.source.connector
        connect = event.connect
        return replace(
            event,
            key=self._rename(event.key),
            before=edit_row(event.before, connector, self._rename),
            after=edit_row(event.after, connector, self._rename),
            encoded=None,
            connect=None if connect is None else renamed(connect, self._pairs),
        )

    def schema(self, schema: TableSchema) -> TableSchema:
        if not self._matches(f"{schema.schema}.{schema.table}"):
            return schema
        names = self._names
        columns = tuple(replace(c, name=names.get(c.name, c.name)) for c in schema.columns)
        if len({c.name for c in columns}) != len(columns):
            raise ValueError(
                f"{schema.schema}.{schema.table}: "
                + _collision([c.name for c in schema.columns], names)
            )
        return replace(schema, columns=columns)


def _collision(columns: list[str], names: dict[str, str]) -> str:
    """Why renaming ``columns`` by ``names`` would merge two of them (one value lost)."""
    taken = [new for old, new in names.items() if old in columns and new in columns]
    kept = [new for new in taken if new not in names]
    return (
        f"rename_fields would give two columns the name {', '.join(kept or taken)}, "
        "and one's values would be lost: rename that column too, or choose another name"
    )


class AddFieldConfig(MatchingConfig):
    """``field`` and either ``value`` (a constant) or ``source`` (where to take it from)."""

    type: Literal["add_field"] = "add_field"
    field: str = Field(pattern=_FIELD)
    value: str | int | float | bool | None = None
    source: str | None = None

    @model_validator(mode="after")
    def _one_value(self) -> AddFieldConfig:
        if self.source is not None:
            if "value" in self.model_fields_set:
                raise ValueError("give value or source, not both")
            if self.source not in ("op", "table") and not (
                self.source.startswith("source.") and len(self.source) > len("source.")
            ):
                raise ValueError("source must be op, table or source.<field> (source.ts_ms...)")
        elif "value" not in self.model_fields_set:
            raise ValueError("give value (a constant) or source (op, table, source.<field>)")
        return self

    @property
    def stable(self) -> bool:
        """The value a row gets does not depend on which change wrote it."""
        source = self.source
        return source is None or source == "table" or source[7:] in _STABLE_SOURCE

    def column_type(self) -> str:
        """The published type of the added column."""
        if self.source is not None:
            return "bigint" if self.source[7:] in _NUMERIC_SOURCE else "text"
        value = self.value
        if isinstance(value, bool):
            return "boolean"
        if isinstance(value, int):
            return "bigint"
        return "double precision" if isinstance(value, float) else "text"


class AddField(BaseTransform):
    """The ``add_field`` transform (see the module docstring)."""

    def __init__(self, config: AddFieldConfig, pipeline: str) -> None:
        self._matches = Matcher(config.match)
        self._config = config
        self._pipeline = pipeline
        self._type = config.column_type()
        self.applies_to_rows = config.stable

    def _value(self, event: ChangeEvent) -> Any:
        source = self._config.source
        if source is None:
            return self._config.value
        if source == "op":
            return event.op.value
        if source == "table":
            return event.table_id
        return source_block(event, self._pipeline).get(source[len("source.") :])

    def apply(self, event: ChangeEvent) -> ChangeEvent:
        if event.op is Op.TRUNCATE or not self._matches(topic_table_id(event)):
            return event
        name, value = self._config.field, self._value(event)

        def add(row: dict[str, Any]) -> dict[str, Any]:
            row[name] = value
            return row

        connector = event.source.connector
        connect = event.connect
        return replace(
            event,
            before=edit_row(event.before, connector, add),
            after=edit_row(event.after, connector, add),
            encoded=None,
            connect=None if connect is None else with_field(connect, name, self._type),
        )

    def schema(self, schema: TableSchema) -> TableSchema:
        if not self._matches(f"{schema.schema}.{schema.table}"):
            return schema
        field = self._config.field
        columns = tuple(c for c in schema.columns if c.name != field)
        return replace(schema, columns=(*columns, Column(field, self._config.column_type())))


class RenameFieldsPlugin:
    """The ``rename_fields`` entry point of ``cdc.transforms``."""

    config_model = RenameFieldsConfig

    @staticmethod
    def create(config: RenameFieldsConfig, context: TransformContext) -> RenameFields:
        return RenameFields(config)


class AddFieldPlugin:
    """The ``add_field`` entry point of ``cdc.transforms``."""

    config_model = AddFieldConfig

    @staticmethod
    def create(config: AddFieldConfig, context: TransformContext) -> AddField:
        return AddField(config, context.pipeline)
