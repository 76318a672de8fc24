"""The ``views:`` section: live join views, each a document per root row with other tables'
rows embedded (docs/views.md), and its checks against the source's tables."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from cdc.config.models import NAME_PATTERN, SourceConfig, StrictModel

#: The schema a view's table has for the sinks: a view ``order_docs`` is ``views.order_docs``.
VIEW_SCHEMA = "views"
#: The document field that holds the positions of the rows a document was built from.
POSITIONS_FIELD = "_positions"
_FIELD_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class EmbedConfig(StrictModel):
    """One embedded table: ``on`` maps a column of the root to a column of ``from``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    field: str = Field(pattern=_FIELD_PATTERN)
    from_table: str = Field(alias="from")
    on: dict[str, str] = Field(min_length=1)
    many: bool = False

    @model_validator(mode="before")
    @classmethod
    def _on_key(cls, data: Any) -> Any:
        # YAML 1.1 (PyYAML's safe_load) reads a bare ``on:`` key as the boolean true.
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if k is True else k): v for k, v in data.items()}
        return data

    @field_validator("from_table")
    @classmethod
    def _qualified(cls, name: str) -> str:
        parts = name.split(".")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"{name!r} must be qualified as schema.table")
        return name

    @field_validator("field")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name == POSITIONS_FIELD:
            raise ValueError(f"{POSITIONS_FIELD!r} is the field of the documents' positions")
        return name

    def parent_columns(self) -> tuple[str, ...]:
        return tuple(self.on)

    def child_columns(self) -> tuple[str, ...]:
        return tuple(self.on.values())


class ViewConfig(StrictModel):
    """A view: one document per row of ``root``, published as ``<pipeline>.views.<name>``."""

    name: str = Field(pattern=NAME_PATTERN, max_length=60)
    root: str
    embed: list[EmbedConfig] = Field(min_length=1)

    @field_validator("root")
    @classmethod
    def _qualified(cls, name: str) -> str:
        return EmbedConfig._qualified(name)

    @model_validator(mode="after")
    def _distinct_fields(self) -> ViewConfig:
        fields = [e.field for e in self.embed]
        if len(set(fields)) != len(fields):
            raise ValueError("two embeds have the same field")
        return self

    @property
    def table(self) -> str:
        """The view's table as sinks name it in ``tables``: ``views.<name>``."""
        return f"{VIEW_SCHEMA}.{self.name}"

    def inputs(self) -> list[str]:
        """The root and every embedded table, each once, in order."""
        return list(dict.fromkeys([self.root, *(e.from_table for e in self.embed)]))


def view_problems(views: list[ViewConfig], source: SourceConfig | None) -> list[tuple[str, str]]:
    """Each view's tables against the source's: a view joins captured tables only."""
    problems: list[tuple[str, str]] = []
    names: set[str] = set()
    captured = set(source.table_names) if source is not None else None
    for index, view in enumerate(views):
        if view.name in names:
            problems.append((f"views[{index}].name", f"view name {view.name!r} is used twice"))
        names.add(view.name)
        if captured is None:
            continue
        if view.root not in captured:
            problems.append((f"views[{index}].root", _not_captured(view.root)))
        for e_index, embed in enumerate(view.embed):
            if embed.from_table not in captured:
                where = f"views[{index}].embed[{e_index}].from"
                problems.append((where, _not_captured(embed.from_table)))
        if view.table in captured:
            problems.append(
                (f"views[{index}].name", f"{view.table!r} is a source table: name the view apart")
            )
    return problems


def _not_captured(table: str) -> str:
    return f"{table!r} is not a source table: add it to source.tables to join it"


def declared_view_tables(raw: object) -> frozenset[str]:
    """``views.<name>`` of each view the raw ``views:`` section names (even one that fails its
    own checks: a sink naming it is then not also told it names no table)."""
    if not isinstance(raw, list):
        return frozenset()
    return frozenset(
        f"{VIEW_SCHEMA}.{v['name']}"
        for v in raw
        if isinstance(v, dict) and isinstance(v.get("name"), str)
    )
