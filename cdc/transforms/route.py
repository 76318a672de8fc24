"""``route``: send the events of the tables a pattern matches to another table's topic.

As Debezium's ``ByLogicalTableRouter`` does, it merges sharded tables into one topic::

    transforms:
      - {type: route, match: "public\\\\.orders_\\\\d+", topic: "public.orders"}

``match`` is a regular expression matched against the whole ``schema.table``; ``topic`` is the
``schema.table`` whose topic (``<pipeline>.<schema>.<table>``) the events go to, and may refer
to the match's groups (``\\1``). The ``source`` block keeps the real table.

Keys stay unique across the merged tables: the record key, and the rows, gain ``key_field``
(Debezium's ``__dbz__physicalTableIdentifier`` by default) holding the event's original topic,
and the routed table's published shape gains it as a key column. ``key_field: null`` leaves the
key alone (only for tables whose keys never collide).

A ``TRUNCATE`` of one of several merged tables would empty the merged table in every sink,
the other tables' rows with it: it is refused (a transform error, which ``bad_records``
handles: the pipeline stops, or the truncate goes to the dead-letter topic). That holds for a
table the pattern leaves alone too, when other tables are routed onto its name. A table
routed alone keeps its truncates.

Under ``schemas.enable`` the events' Connect schemas are renamed after the new topic
(``<topic>.Envelope``, ``.Value``, ``.Key``), as Debezium's router does, and gain
``key_field`` as a string; every column keeps its type.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from cdc.contracts.events import ChangeEvent, Op, topic_name
from cdc.contracts.schema import Column, TableSchema
from cdc.envelope.json_rows import edit_row
from cdc.transforms.base import BaseTransform, TransformConfig, TransformContext, topic_table_id
from cdc.transforms.connect import routed

DEBEZIUM_KEY_FIELD = "__dbz__physicalTableIdentifier"
_GROUP_REF = re.compile(r"\\(\d+)|\\g<(\d+)>")
_NAMED_REF = re.compile(r"\\g<\w+>")


class RouteConfig(TransformConfig):
    """``match`` (a regular expression over ``schema.table``), ``topic`` (the target
    ``schema.table``, with ``\\1`` for groups) and ``key_field`` (``null``: no key field)."""

    type: Literal["route"] = "route"
    match: str
    topic: str
    key_field: str | None = Field(default=DEBEZIUM_KEY_FIELD, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @field_validator("match")
    @classmethod
    def _compiles(cls, match: str) -> str:
        try:
            re.compile(match)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return match

    @model_validator(mode="after")
    def _target(self) -> RouteConfig:
        pattern = re.compile(self.match)
        for ref in _GROUP_REF.finditer(self.topic):
            if int(ref.group(1) or ref.group(2)) > pattern.groups:
                raise ValueError(f"topic refers to group {ref.group(0)}, which match lacks")
        try:
            pattern.sub(self.topic, "")  # parses the template: named groups, escapes
        except (re.error, IndexError) as exc:
            raise ValueError(
                f"topic {self.topic!r} is not a replacement for match: {exc}"
            ) from None
        if not _is_table(_NAMED_REF.sub("x", _GROUP_REF.sub("x", self.topic))):
            raise ValueError(f"topic {self.topic!r} must be a schema.table (or db.collection)")
        return self


def _is_table(name: str) -> bool:
    parts = name.split(".")
    return len(parts) == 2 and all(parts)


class Route(BaseTransform):
    """The ``route`` transform (see the module docstring)."""

    def __init__(self, config: RouteConfig, context: TransformContext) -> None:
        self._pattern = re.compile(config.match)
        self._target = config.topic
        self._key_field = config.key_field
        self._pipeline = context.pipeline
        self._targets: dict[str, tuple[str, str] | None] = {}
        for table in context.tables:
            target = self.table(table)
            if not _is_table(target):
                raise ValueError(
                    f"route {config.match!r} sends {table} to {target!r}, which is not a "
                    "schema.table: check the groups topic refers to"
                )
        # A table the pattern leaves alone still merges with those routed onto its name.
        merged = Counter(self.table(t) for t in context.tables)
        self._merged = {t for t, n in merged.items() if n > 1}

    def _routed(self, table: str) -> tuple[str, str] | None:
        """Where ``table``'s events go, or ``None`` when the pattern does not match it."""
        if table not in self._targets:
            found = self._pattern.fullmatch(table)
            target = None
            if found is not None:
                schema, _, name = found.expand(self._target).partition(".")
                target = (schema, name)
            self._targets[table] = target
        return self._targets[table]

    def table(self, table: str) -> str:
        target = self._routed(table)
        return table if target is None else f"{target[0]}.{target[1]}"

    def schema(self, schema: TableSchema) -> TableSchema:
        target = self._routed(f"{schema.schema}.{schema.table}")
        if target is None:
            return schema
        columns = schema.columns
        if self._key_field is not None:
            kept = tuple(c for c in columns if c.name != self._key_field)
            columns = (*kept, Column(self._key_field, "text", key=True, nullable=False))
        return replace(schema, schema=target[0], table=target[1], columns=columns)

    def apply(self, event: ChangeEvent) -> ChangeEvent:
        table = topic_table_id(event)
        target = self._routed(table)
        if event.op is Op.TRUNCATE:
            return self._truncate(event, table, target)
        if target is None:
            return event
        field = self._key_field
        topic = topic_name(self._pipeline, *target)
        connect = event.connect
        if connect is not None:
            connect = routed(connect, topic, field)
        if field is None:
            return replace(event, destination=target, encoded=None, connect=connect)
        original = topic_name(self._pipeline, *event.topic_table)

        def add(row: dict[str, Any]) -> dict[str, Any]:
            row[field] = original
            return row

        connector = event.source.connector
        return replace(
            event,
            key={**event.key, field: original},
            before=edit_row(event.before, connector, add),
            after=edit_row(event.after, connector, add),
            destination=target,
            encoded=None,
            connect=connect,
        )

    def _truncate(
        self, event: ChangeEvent, table: str, target: tuple[str, str] | None
    ) -> ChangeEvent:
        reached = table if target is None else f"{target[0]}.{target[1]}"
        if reached in self._merged:
            raise ValueError(
                f"a TRUNCATE of {table} cannot reach {reached}, which merges several tables: "
                f"it would empty the rows of all of them in every sink; delete {table}'s rows "
                "instead, or re-snapshot after resetting the sinks' table"
            )
        if target is None:
            return event
        connect = event.connect
        if connect is not None:
            connect = routed(connect, topic_name(self._pipeline, *target), None)
        return replace(event, destination=target, encoded=None, connect=connect)


class RoutePlugin:
    """The ``route`` entry point of ``cdc.transforms``."""

    config_model = RouteConfig

    @staticmethod
    def create(config: RouteConfig, context: TransformContext) -> Route:
        return Route(config, context)
