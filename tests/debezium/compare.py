"""Compare our records with Debezium's, record by record, as parsed JSON.

A record is ``{"topic", "key", "value"}`` with key and value parsed (value None: a tombstone;
either may be the JsonConverter's ``{"schema", "payload"}``). :func:`compare_topic` pairs the
two sides' records of one topic in order (aligned on key and op, so one missing record is
reported as missing instead of shifting every later pair), lets each :class:`Deviation` rewrite
what it excuses, and returns every remaining :class:`Difference` as a JSON path with both
values. Equality is strict: ``0`` is not ``0.0``, ``true`` is not ``1``, and keys must come in
Debezium's order.

The documented deviations live in one list, in the differential test module; the helpers they
are built from (:func:`mask_paths`, ...) live here.
"""

from __future__ import annotations

import copy
import datetime as dt
import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Context",
    "Deviation",
    "Difference",
    "compare_topic",
    "diff",
    "key_payload",
    "key_text",
    "mask",
    "payload",
    "snapshot_date",
    "summary",
]

Record = dict[str, Any]


@dataclass
class Context:
    """What a deviation may know about the pair it looks at.

    Attributes:
        topic: The topic.
        index: The pair's place in Debezium's records of the topic.
        previous: Per key (as JSON), the last ``after`` Debezium gave before this record.
    """

    topic: str
    index: int
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Deviation:
    """One documented exception: ``apply(ours, theirs, context)`` rewrites the two copies so
    that what it excuses compares equal, and nothing else."""

    name: str
    reason: str
    apply: Callable[[Record, Record, Context], None]


@dataclass(frozen=True)
class Difference:
    """One JSON path where the two records differ."""

    topic: str
    index: int
    path: str
    kind: str  # value | type | missing | extra | key order | record missing | record extra
    ours: Any
    theirs: Any

    def line(self) -> str:
        return f"{self.topic}[{self.index}] {self.path}: {self.both()}"

    def both(self) -> str:
        """``ours X != debezium Y``, an absent side said so (not shown as null)."""
        ours = "(absent)" if self.kind in ("missing", "record missing") else _show(self.ours)
        theirs = "(absent)" if self.kind in ("extra", "record extra") else _show(self.theirs)
        return f"ours {ours} != debezium {theirs}"


def payload(value: Any) -> dict[str, Any] | None:
    """The envelope of a record value, unwrapped from ``{"schema", "payload"}`` if wrapped."""
    if isinstance(value, dict) and set(value) == {"schema", "payload"}:
        inner = value["payload"]
        return inner if isinstance(inner, dict) else None
    return value if isinstance(value, dict) else None


def value_schema(value: Any) -> dict[str, Any] | None:
    """The Connect schema of a wrapped record value, else None."""
    if isinstance(value, dict) and set(value) == {"schema", "payload"}:
        schema = value["schema"]
        return schema if isinstance(schema, dict) else None
    return None


def mask(value: Any) -> Any:
    """Hides a run-specific value but keeps its shape: numbers become ``"<number>"``, digits in
    strings ``#`` (so ``[null,"123"]`` stays a string holding a null and a number); null, bools
    and missing keys stay what they are."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return "<number>"
    if isinstance(value, str):
        return re.sub(r"\d+", "#", value)
    return value


def mask_paths(record: Record, paths: Iterable[str]) -> None:
    """Masks each dotted path of the record's envelope (``source.lsn``, ``ts_ms``) if present."""
    envelope = payload(record["value"])
    if envelope is None:
        return
    for path in paths:
        *parents, leaf = path.split(".")
        node: Any = envelope
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            node[leaf] = mask(node[leaf])


#: Debezium's streamed date sentinels (-5877611-06-21/-22) and what its snapshot writes instead.
_SNAPSHOT_INFINITY: dict[Any, Any] = {
    -2_147_472_692: -622_191_234,
    -2_147_472_691: -625_821_272,
    "-5877611-06-21Z": "+292278994-08-16Z",
    "-5877611-06-22Z": "+292269055-12-02Z",
}
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_CYCLE_DAYS, _CYCLE_YEARS = 146_097, 400  # the Gregorian calendar repeats every 400 years
_ISO_BC = re.compile(r"(-\d{4,}|0000)(-\d\d-\d\dZ)")


def snapshot_date(value: Any) -> Any:
    """What Debezium's snapshot writes for a date its streaming (and ours, everywhere) writes as
    ``value``: it reads dates through JDBC, which overflows an infinity and drops a BC date's
    era (the same month and day in year ``1 - year``), as epoch days or ISO under isostring.
    None for any other value (and for anything not a date's form)."""
    if type(value) in (int, str) and value in _SNAPSHOT_INFINITY:
        return _SNAPSHOT_INFINITY[value]
    if isinstance(value, str):
        match = _ISO_BC.fullmatch(value)
        return f"{1 - int(match[1]):04d}{match[2]}" if match else None
    if type(value) is not int or value >= dt.date(1, 1, 1).toordinal() - _EPOCH_ORDINAL:
        return None
    cycles = -value // _CYCLE_DAYS + 1  # into the years Python's date holds
    day = dt.date.fromordinal(value + _EPOCH_ORDINAL + cycles * _CYCLE_DAYS)
    year = day.year - cycles * _CYCLE_YEARS
    if year > 0 or 1 - year > dt.MAXYEAR:
        return None
    return day.replace(year=1 - year).toordinal() - _EPOCH_ORDINAL


def diff(ours: Any, theirs: Any, path: str = "") -> list[tuple[str, str, Any, Any]]:
    """``(path, kind, ours, theirs)`` for every difference; exact types, Debezium's key order."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return _diff_objects(ours, theirs, path)
    if isinstance(ours, list) and isinstance(theirs, list):
        return _diff_lists(ours, theirs, path)
    if type(ours) is not type(theirs):
        return [(path, "type", ours, theirs)]
    return [] if ours == theirs else [(path, "value", ours, theirs)]


def _diff_objects(ours: dict[str, Any], theirs: dict[str, Any], path: str) -> list[Any]:
    out: list[Any] = []
    for name in theirs:
        if name not in ours:
            out.append((_join(path, name), "missing", None, theirs[name]))
        else:
            out += diff(ours[name], theirs[name], _join(path, name))
    out += [(_join(path, n), "extra", ours[n], None) for n in ours if n not in theirs]
    common_ours = [n for n in ours if n in theirs]
    common_theirs = [n for n in theirs if n in ours]
    if common_ours != common_theirs:
        out.append((path or "(top)", "key order", common_ours, common_theirs))
    return out


def _diff_lists(ours: list[Any], theirs: list[Any], path: str) -> list[Any]:
    # A Connect schema's "fields": pair them by field name, so one missing field is one
    # difference, and the path names the column.
    if _named(ours) and _named(theirs):
        return _diff_objects(_by_field(ours), _by_field(theirs), path)
    if len(ours) != len(theirs):
        return [(path, "value", ours, theirs)]
    out: list[Any] = []
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        out += diff(a, b, f"{path}[{i}]")
    return out


def _named(items: list[Any]) -> bool:
    return bool(items) and all(
        isinstance(i, dict) and isinstance(i.get("field"), str) for i in items
    )


def _by_field(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {f"fields[{i['field']}]": i for i in items}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def compare_topic(
    topic: str,
    ours: Sequence[Record],
    theirs: Sequence[Record],
    deviations: Sequence[Deviation],
) -> list[Difference]:
    """Every difference between the two sides' records of ``topic``, after the deviations."""
    out: list[Difference] = []
    context = Context(topic, 0)
    matcher = difflib.SequenceMatcher(a=_signatures(ours), b=_signatures(theirs), autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        pairs = min(a1 - a0, b1 - b0) if tag in ("equal", "replace") else 0
        for k in range(pairs):
            context.index = b0 + k
            out += compare_record(ours[a0 + k], theirs[b0 + k], deviations, context)
            _remember(context, theirs[b0 + k])
        for k in range(b0 + pairs, b1):
            out.append(Difference(topic, k, "(record)", "record missing", None, _brief(theirs[k])))
            _remember(context, theirs[k])
        for k in range(a0 + pairs, a1):
            out.append(Difference(topic, b1, "(record)", "record extra", _brief(ours[k]), None))
    return out


def compare_record(
    ours: Record, theirs: Record, deviations: Sequence[Deviation], context: Context
) -> list[Difference]:
    """The differences of one pair, after every deviation rewrote its copies."""
    a = {"key": copy.deepcopy(ours["key"]), "value": copy.deepcopy(ours["value"])}
    b = {"key": copy.deepcopy(theirs["key"]), "value": copy.deepcopy(theirs["value"])}
    for deviation in deviations:
        deviation.apply(a, b, context)
    found: list[tuple[str, str, Any, Any]] = []
    for part in ("key", "value"):
        found += _diff_part(a[part], b[part], part)
    return [Difference(context.topic, context.index, *d) for d in found]


def _diff_part(ours: Any, theirs: Any, path: str) -> list[tuple[str, str, Any, Any]]:
    # Debezium wrapped it in {"schema", "payload"} and ours is bare: one "shape" difference,
    # then ours against the payload, so the values are still compared one by one.
    if _wrapped(theirs) and isinstance(ours, dict) and not _wrapped(ours):
        shape = (path, "shape", "no {schema, payload} wrapper", "{schema, payload}")
        return [shape, *diff(ours, theirs["payload"], f"{path}.payload")]
    return diff(ours, theirs, path)


def _wrapped(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"schema", "payload"}


def _signatures(records: Sequence[Record]) -> list[str]:
    # Alignment only: the key's payload and the op. A truncate's key differs by design
    # ({} against null), so keys of truncates are left out.
    out = []
    for record in records:
        envelope = payload(record["value"])
        op = envelope.get("op") if envelope else None
        key = None if op == "t" else key_payload(record["key"])
        out.append(json.dumps([key, op], sort_keys=True))
    return out


def key_payload(key: Any) -> Any:
    """A record key without its schema (``{"schema", "payload"}``), else the key itself."""
    if isinstance(key, dict) and set(key) == {"schema", "payload"}:
        return key["payload"]
    return key


def key_text(record: Record) -> str:
    """The record key's payload as canonical JSON: what :attr:`Context.previous` is keyed by."""
    return json.dumps(key_payload(record["key"]), sort_keys=True)


def _remember(context: Context, record: Record) -> None:
    envelope = payload(record["value"])
    if envelope and isinstance(envelope.get("after"), dict):
        context.previous[key_text(record)] = envelope["after"]


def _brief(record: Record) -> str:
    envelope = payload(record["value"])
    op = envelope.get("op") if envelope else "tombstone"
    return f"op {op}, key {json.dumps(key_payload(record['key']))}"


def _show(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _topic_table(topic: str) -> str:
    return topic.rsplit(".", 1)[-1]


def summary(differences: Sequence[Difference]) -> str:
    """The differences grouped by table, path and kind, each with a count and an example.

    Fields missing (or extra) under one parent are one line naming them: a ``before`` without
    26 columns is one fact, not 26.
    """
    if not differences:
        return "no differences"
    groups: dict[tuple[str, str, str], list[Difference]] = {}
    for d in differences:
        parent = d.path.rpartition(".")[0]
        merged = d.kind in ("missing", "extra") and parent != ""
        key = (_topic_table(d.topic), parent if merged else d.path, d.kind)
        groups.setdefault(key, []).append(d)
    lines = [f"{len(differences)} difference(s) in {len(groups)} group(s):"]
    for (table, path, kind), found in sorted(groups.items()):
        leaves = sorted({d.path.rpartition(".")[2] for d in found})
        where = path
        if kind in ("missing", "extra"):
            where = found[0].path if len(leaves) == 1 else f"{path}.{{{', '.join(leaves)}}}"
        lines.append(f"  {table} {where} ({kind}) x{len(found)}, e.g. {found[0].both()}")
    return "\n".join(lines)


def by_topic(records: Iterable[Record], topics: Iterable[str]) -> Mapping[str, list[Record]]:
    """The records of each of ``topics``, in order (others, such as ``dbz.message``, dropped)."""
    out: dict[str, list[Record]] = {t: [] for t in topics}
    for record in records:
        if record["topic"] in out:
            out[record["topic"]].append(record)
    return out
