"""Notice, at start, that the log was written under other transforms or table filters.

Records already in a topic were shaped by the transforms, column lists, masks and row filters
of their time. A start with different ones would mix two shapes in one topic without a word, so
the log stores what shaped it (digests only, under the source offsets' ``filters`` key, in the
same transaction as the records) and a start compares:

* the transforms' configuration (:meth:`TransformChain.fingerprint`);
* each table's entry (:meth:`TableEntry.fingerprint`): a table added since has nothing to
  compare with, a table removed nothing to care about;
* a check value of ``source.mask_key`` (:func:`key_check`): an HMAC of a fixed text under the
  key, so a new key is noticed without the key, or anything a guess could be tested against
  more easily than against the hashed values themselves, being stored.

``on_transform_change`` says what a difference does: ``fail`` (the default) refuses to start
and says what changed and the choices; ``continue`` takes the new settings from here on, the
records before stay as they were; ``resnapshot`` takes them and re-reads the affected tables
while streaming (every table when the transforms or the key changed), so each row's record is
written under them again.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from cdc.config.pipeline import Pipeline
from cdc.contracts.errors import ConfigError
from cdc.support.logging import Logger
from cdc.transforms.filters import digest

OFFSET_KEY: Final = "filters"
_NO_TRANSFORMS: Final = digest([])
_KEY_CHECK_TEXT: Final = b"cdc mask key check"


def key_check(key: bytes | None) -> str | None:
    """The check value of a mask key (``None`` without one)."""
    if key is None:
        return None
    return hmac.new(key, _KEY_CHECK_TEXT, hashlib.sha256).hexdigest()[:16]


def current(pipeline: Pipeline) -> dict[str, Any]:
    """What the log stores of ``pipeline``'s transforms and filters."""
    source = pipeline.source
    return {
        "transforms": pipeline.chain().fingerprint(),
        "tables": {t.name: t.fingerprint() for t in source.tables},
        "mask_key": key_check(source.mask_key_bytes()),
    }


@dataclass(frozen=True)
class Changes:
    """What differs from what the log was written under."""

    transforms: bool = False
    mask_key: bool = False
    tables: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.transforms or self.mask_key or bool(self.tables)

    def describe(self) -> str:
        parts = []
        if self.transforms:
            parts.append("the transforms")
        if self.mask_key:
            parts.append("source.mask_key")
        if self.tables:
            parts.append(f"the columns, masks, row filter or ops of {', '.join(self.tables)}")
        return " and ".join(parts)


def changes(stored: Mapping[str, Any] | None, now: Mapping[str, Any]) -> Changes:
    """How ``now`` differs from ``stored`` (``None``: a log from before any was stored, which
    was written with no transforms and no filters)."""
    if stored is None:
        plain = digest({})
        stored = {"transforms": _NO_TRANSFORMS, "tables": {}, "mask_key": None}
        known = {name: plain for name in now["tables"]}
    else:
        known = dict(stored.get("tables") or {})
    tables = [name for name, print_ in now["tables"].items() if known.get(name, print_) != print_]
    return Changes(
        transforms=stored.get("transforms", _NO_TRANSFORMS) != now["transforms"],
        mask_key=_key_changed(stored.get("mask_key"), now["mask_key"]),
        tables=tables,
    )


def _key_changed(stored: str | None, now: str | None) -> bool:
    # A key added with the first hash masks changes nothing written before: those tables'
    # entries changed, and they are named. Only a different key for the same hashes counts.
    return stored is not None and now is not None and stored != now


def _to_reread(pipeline: Pipeline, found: Changes) -> tuple[str, ...]:
    """The tables a resnapshot re-reads: every one when the transforms changed, those whose
    entry changed, and with a new key those with a hash mask."""
    if found.transforms:
        return tuple(pipeline.source.table_names)
    hashed = {
        t.name for t in pipeline.source.tables if any(m.type == "hash" for m in t.mask.values())
    }
    changed = set(found.tables) | (hashed if found.mask_key else set())
    return tuple(t for t in pipeline.source.table_names if t in changed)


class TransformsChanged(ConfigError):
    """The log was written under other transforms or filters, and ``on_transform_change`` is
    ``fail``."""


@dataclass(frozen=True)
class StartPlan:
    """What a start does about the transforms and filters: the fingerprint to store with the
    next commit, and the tables to re-snapshot while streaming."""

    store: dict[str, Any]
    resnapshot: tuple[str, ...] = ()
    #: Of ``resnapshot``, the tables whose own entry changed.
    refiltered: tuple[str, ...] = ()


def plan(pipeline: Pipeline, offsets: Mapping[str, Any], logger: Logger) -> StartPlan:
    """Compare ``pipeline`` with what ``offsets`` (the log's source offsets) say it was.

    Raises:
        TransformsChanged: they differ and ``on_transform_change`` is ``fail``.
    """
    now = current(pipeline)
    if not offsets:
        return StartPlan(now)  # a first start: nothing was written yet
    found = changes(offsets.get(OFFSET_KEY), now)
    if not found:
        return StartPlan(now)
    policy = pipeline.file.on_transform_change
    what = found.describe()
    if policy == "fail":
        raise TransformsChanged(
            [
                (
                    "on_transform_change",
                    f"{what} changed since the log was written; its records keep their old shape. "
                    "Set on_transform_change: resnapshot to re-read the tables under the new "
                    "settings, or continue to apply them to new changes only (or set them back)",
                )
            ]
        )
    tables: tuple[str, ...] = ()
    if policy == "resnapshot":
        tables = _to_reread(pipeline, found)
    logger.warning(
        "transforms.changed", changed=what, on_transform_change=policy, resnapshot=list(tables)
    )
    return StartPlan(now, tables, tuple(t for t in tables if t in found.tables))
