"""``cdc trace``'s sink side: what each sink holds for the key, and why it holds that version and
no other.

A sink plugin may answer ``read_key`` (:class:`cdc.contracts.sink.SinkPlugin`): the row and the
source position the store recorded for it. One that cannot is read through ``read_rows``, and
the version it holds is inferred by comparing its row with the log's versions. Each version of
the key in the log then gets a verdict for the sink, from the sink's committed offset, its dead
letters and the positions: ``held``, ``stale`` (it came after a newer one had been applied, and
was skipped), ``replaced`` (a newer version replaced it), ``dead_lettered``, ``lagging`` (not
consumed yet) or ``missing`` (consumed, newer than what the sink holds: the sink lost it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from cdc.cli.trace_log import Version, key_text
from cdc.contracts import plugins
from cdc.contracts.schema import TableSchema
from cdc.envelope.options import EnvelopeOptions
from cdc.records.normalize import canonical_row
from cdc.records.values import decoder

Canon = Callable[[dict[str, Any] | None], bytes | None]


def held_state(
    config: Any, pipeline: str, table: str, key: dict[str, Any], any_type: bool = False
) -> tuple[bool, tuple[dict[str, Any] | None, tuple[Any, Any] | None] | None]:
    """Whether the store keeps positions, and ``(row, position)`` of the key (``None``: the
    store holds nothing of it). A plugin without ``read_key`` (or whose ``read_key`` raises
    ``NotImplementedError`` for the table) is read whole through ``read_rows``; without either,
    ``LookupError``. ``any_type``: the table's key column has no type (a MongoDB ``_id``)."""
    plugin = plugins.load(plugins.SINK_GROUP, config.type)
    schema, _, name = table.partition(".")
    read_key = getattr(plugin, "read_key", None)
    if read_key is not None:
        try:
            found = read_key(config, schema, name, key, pipeline=pipeline, any_type=any_type)
        except NotImplementedError:
            pass  # not a table the store looks keys up in (a document layout): read it whole
        else:
            return True, None if found is None else (found[0], _pair(found[1]))
    read_rows = getattr(plugin, "read_rows", None)
    if read_rows is None:
        raise LookupError(f"{config.type} sinks cannot be read back")
    wanted = key_text(key)
    match = None
    # To the end, not up to the key: a reader left mid-read may keep its store busy.
    for found_key, row in read_rows(config, schema, name, pipeline=pipeline):
        candidate = {c: row.get(c, found_key.get(c)) for c in key}
        if match is None and key_text(candidate) == wanted:
            match = (row, None)
    return False, match


def _pair(position: Any) -> tuple[Any, Any] | None:
    return None if position is None else (position[0], position[1])


def canonicalizer(schema: TableSchema | None, envelope: EnvelopeOptions, decoded: bool) -> Canon:
    """Rows to comparable bytes: values decoded from the envelope's encoding (unless the store
    gave them decoded), in the canonical form ``cdc verify`` compares."""
    if schema is None:
        return lambda row: None if row is None else orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
    decoders = {c.name: _lenient(decoder(c.type, envelope)) for c in schema.columns}

    def canon(row: dict[str, Any] | None) -> bytes | None:
        if row is None:
            return None
        if not decoded:
            row = {n: (decoders[n](v) if n in decoders else v) for n, v in row.items()}
        return orjson.dumps(canonical_row(row, schema), option=orjson.OPT_SORT_KEYS)

    return canon


def _lenient(decode: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # A value the encoding does not read is compared as it is: a difference, not a crash.
    def run(value: Any) -> Any:
        try:
            return decode(value)
        except (ValueError, TypeError, KeyError, ArithmeticError):
            return value

    return run


def verdicts(
    versions: list[Version],
    committed: dict[int, int],
    letters: dict[int, str],
    held: tuple[Any, Any] | None,
) -> list[dict[str, Any]]:
    """Each version's verdict for one sink (see the module docstring), in offset order.

    Args:
        committed: the sink's next offset per partition (absent: nothing consumed).
        letters: offset -> reason of the sink's dead letters of the key.
        held: the position the sink holds for the key (``None``: not known or none).
    """
    out = []
    newest: Version | None = None  # the newest applied so far, in the order the sink read them
    for version in versions:
        verdict = _verdict(version, committed, letters, held, newest)
        applied = verdict["verdict"] in ("held", "replaced") and version.position is not None
        if applied and (newest is None or not_newer(newest, version)):
            newest = version
        out.append(verdict)
    return out


def _verdict(
    version: Version,
    committed: dict[int, int],
    letters: dict[int, str],
    held: tuple[Any, Any] | None,
    newest: Version | None,
) -> dict[str, Any]:
    offset, position = version.offset, version.position
    next_offset = committed.get(version.partition, 0)
    if offset >= next_offset:
        why = f"not applied yet: the sink's next offset in partition {version.partition} is"
        return {"verdict": "lagging", "why": f"{why} {next_offset}"}
    if offset in letters:
        return {"verdict": "dead_lettered", "why": letters[offset]}
    if newest is not None and not not_newer(newest, version):
        return {
            "verdict": "stale",
            "why": f"older position: a newer version (offset {newest.offset}, position "
            f"{list(newest.position or ())}) was applied before it, so it was skipped",
        }
    if held is None or position is None:
        return {"verdict": "replaced", "why": None}  # settled by rows (infer_held) below
    if position == held:
        return {"verdict": "held", "why": None}
    if position < held:
        return {
            "verdict": "replaced",
            "why": f"a newer version (position {list(held)}) replaced it",
        }
    return {
        "verdict": "missing",
        "why": f"consumed, newer than the position the sink holds ({list(held)}): not in the sink",
    }


def infer_held(
    versions: list[Version], verdicts_: list[dict[str, Any]], row: bytes | None, canon: Canon
) -> None:
    """For a store that keeps no position: the newest consumed version whose row equals the
    sink's row is ``held``; the others that were applied are ``replaced`` (or ``missing`` if
    newer than the held one)."""
    applied = [
        (v, d) for v, d in zip(versions, verdicts_, strict=True) if d["verdict"] == "replaced"
    ]
    match = None
    for version, _ in applied:
        mine = None if version.removes else canon(version.row)
        if mine == row:
            match = version
    for version, verdict in applied:
        if match is None:
            verdict["why"] = "the sink's row equals none of the applied versions"
        elif version is match:
            verdict.update(verdict="held", why="inferred: the sink's row equals this version's")
        elif not_newer(version, match):
            verdict["why"] = "a newer version replaced it"
        else:
            verdict.update(verdict="missing", why="consumed, newer than the version the sink holds")


def not_newer(version: Version, other: Version) -> bool:
    """``version`` is not newer than ``other``: by position, else by offset."""
    if version.position is not None and other.position is not None:
        return version.position <= other.position
    return version.offset <= other.offset


def expected(versions: list[Version], verdicts_: list[dict[str, Any]]) -> Version | None:
    """The version the sink should hold now: the newest by position it consumed, not
    dead-lettered (tombstones follow their deletes, so a later record wins a tie)."""
    best = None
    for version, verdict in zip(versions, verdicts_, strict=True):
        if verdict["verdict"] in ("lagging", "dead_lettered"):
            continue
        if best is None or not_newer(best, version):
            best = version
    return best
