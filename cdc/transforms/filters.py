"""What leaves the database, per table: ``source.tables`` entries with their filters.

A plain name (``public.orders``) captures every column, row and operation. A mapping names the
table and narrows it::

    - name: public.users
      columns: {exclude: [password_hash]}        # or include: [id, email, name]
      mask: {email: hash, ssn: redact, phone: {type: keep_last, n: 4}, notes: "null"}
      where: "tenant_id = 42 AND NOT deleted"    # MongoDB: a query document
      ops: [c, u, d, r]

Each source applies these where the data is read, before anything is encoded (PostgreSQL: the
publication's column list and row filter, the row encoder's masks; MongoDB: the change stream's
and the snapshot query's projection and match), so nothing a filter removes reaches a topic.
:func:`fingerprint` is what the log stores of them, to notice a change at the next start
(:mod:`cdc.runtime.fingerprints`).
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cdc.transforms.masks import MaskType, available_plugins

OpCode = Literal["c", "u", "d", "r", "t"]
ALL_OPS: Final = frozenset(("c", "u", "d", "r", "t"))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ColumnSelection(_Strict):
    """``include`` (only these columns) or ``exclude`` (all but these), never both."""

    include: list[str] | None = Field(default=None, min_length=1)
    exclude: list[str] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_of(self) -> ColumnSelection:
        if (self.include is None) == (self.exclude is None):
            raise ValueError("give either include or exclude")
        listed = self.include or self.exclude or []
        if len(set(listed)) != len(listed):
            raise ValueError("a column is listed more than once")
        return self

    def keeps(self, column: str) -> bool:
        """Whether ``column`` leaves the database."""
        if self.include is not None:
            return column in self.include
        return column not in (self.exclude or ())

    def named(self) -> list[str]:
        """The columns the selection names."""
        return list(self.include or self.exclude or [])


class MaskSpec(_Strict):
    """One column's mask (:mod:`cdc.transforms.masks`): a type name, or a mapping with its
    parameters."""

    type: MaskType
    n: int | None = Field(default=None, ge=0)
    name: str | None = None  # plugin
    options: dict[str, Any] = Field(default_factory=dict)  # plugin

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # ``email: hash``; ``notes: null`` (YAML's null) and ``notes: "null"`` mean the same.
        if value is None:
            return {"type": "null"}
        if isinstance(value, str):
            return {"type": value}
        return value

    @model_validator(mode="after")
    def _parameters(self) -> MaskSpec:
        if self.type == "keep_last" and self.n is None:
            raise ValueError("keep_last needs n, the number of characters kept")
        if self.type != "keep_last" and self.n is not None:
            raise ValueError(f"n applies to keep_last only, not {self.type}")
        if self.type == "plugin" and not self.name:
            raise ValueError("a plugin mask needs name: the cdc.masks entry point")
        if self.type == "plugin" and self.name not in available_plugins():
            known = ", ".join(available_plugins()) or "none"
            raise ValueError(f"unknown mask plugin {self.name!r} (installed: {known})")
        if self.type != "plugin" and (self.name or self.options):
            raise ValueError(f"name and options apply to plugin masks only, not {self.type}")
        return self


class TableEntry(_Strict):
    """One captured table and what of it is captured."""

    name: str
    columns: ColumnSelection | None = None
    mask: dict[str, MaskSpec] = Field(default_factory=dict)
    where: str | dict[str, Any] | None = None
    ops: list[OpCode] | None = Field(default=None, min_length=1)

    @field_validator("name")
    @classmethod
    def check_name(cls, name: str) -> str:
        """Raises ValueError: ``name`` is not ``schema.table`` (or ``db.collection``)."""
        parts = name.split(".")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"{name!r} must be qualified as schema.table (or db.collection)")
        return name

    @field_validator("where")
    @classmethod
    def _not_blank(cls, where: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if (isinstance(where, str) and not where.strip()) or where == {}:
            raise ValueError("is empty: leave it out to capture every row")
        return where

    @field_validator("ops")
    @classmethod
    def _distinct(cls, ops: list[OpCode] | None) -> list[OpCode] | None:
        if ops is not None and len(set(ops)) != len(ops):
            raise ValueError("an operation is listed more than once")
        return ops

    @model_validator(mode="after")
    def _masks_kept(self) -> TableEntry:
        if self.columns is not None:
            dropped = [c for c in self.mask if not self.columns.keeps(c)]
            if dropped:
                raise ValueError(
                    f"mask names {dropped}, which columns leaves out: a column that never "
                    "leaves the database needs no mask"
                )
        return self

    @property
    def schema_name(self) -> str:
        """The schema (or database) part of :attr:`name`."""
        return self.name.partition(".")[0]

    @property
    def table_name(self) -> str:
        """The table (or collection) part of :attr:`name`."""
        return self.name.partition(".")[2]

    @property
    def filtered(self) -> bool:
        """Whether anything of the table is left out or masked."""
        return bool(self.columns or self.mask or self.where is not None or self.ops)

    def keeps(self, column: str) -> bool:
        """Whether ``column`` leaves the database."""
        return self.columns is None or self.columns.keeps(column)

    def hidden_names(self) -> list[str]:
        """The columns the entry masks or leaves out by name (an ``include`` list hides the
        columns it does not name, which it cannot list)."""
        excluded = self.columns.exclude if self.columns is not None else None
        return [*self.mask, *(excluded or ())]

    def case_twins(self, columns: list[str]) -> list[tuple[str, str]]:
        """``(column, hidden)``: a column of ``columns`` named like a masked or left-out one
        only by case, which nothing hides (``"Email"`` beside masked ``email``)."""
        hidden = {c.casefold(): c for c in self.hidden_names()}
        return [
            (c, hidden[c.casefold()])
            for c in columns
            if c.casefold() in hidden
            and c != hidden[c.casefold()]
            and self.keeps(c)
            and c not in self.mask
        ]

    def allows(self, op: str) -> bool:
        """Whether changes of operation ``op`` (``c``, ``u``, ``d``, ``r``, ``t``) are captured."""
        return self.ops is None or op in self.ops

    def fingerprint(self) -> str:
        """A digest of what the entry captures: equal for equal filters, whatever the YAML's
        spelling or key order (the masks' key is not in it: see
        :func:`cdc.runtime.fingerprints.key_check`)."""
        data = self.model_dump(mode="json", exclude={"name"}, exclude_defaults=True)
        # Lists whose order means nothing: [c, u] and [u, c] capture the same.
        if "ops" in data:
            data["ops"] = sorted(data["ops"])
        for kind, listed in (data.get("columns") or {}).items():
            data["columns"][kind] = sorted(listed)
        return digest(data)


def digest(value: Any) -> str:
    """A short, stable digest of a JSON value (keys sorted)."""
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()[:16]


def entry(value: Any) -> Any:
    """A ``source.tables`` item as a mapping: a plain name becomes ``{"name": name}``."""
    return {"name": value} if isinstance(value, str) else value
