"""Our records equal Debezium's: the same workload captured at once by Debezium 3.6.1 and ``cdc``.

For each settings combination of ``tests/debezium/workload.py`` (Debezium's defaults, the
readable ones with and without Connect schemas, connect/double/hex, adaptive µs/url-safe/ISO
intervals), one PostgreSQL database is captured by the real Debezium (embedded engine, its own
slot) and by ``cdc run`` (its own slot and publication, the embedded log, the same options in
its ``envelope:`` block under Debezium's names): the snapshot, inserts, updates, primary-key
updates, deletes under DEFAULT and FULL identity, a truncate, unchanged TOAST, and an online
re-snapshot; and a table of every form of ``numeric`` (no scale, a scale, big, negative, zero,
trailing zeros, NaN and the infinities) and ``timestamptz(p)`` (fractions with trailing zeros),
truncated too. Each topic's records are compared in order, key and value as parsed JSON, strictly
(types and key order too), except for :data:`DEVIATIONS`, the one list of what may differ.
Since both read the same transactions, streamed records' ``txId``, ``lsn``, ``sequence`` and
``source.ts_*`` must be equal.

Debezium's records are also compared with ``tests/debezium/expected/<setting>.jsonl``
(run-specific positions and times masked), so a change in Debezium shows up when those files
are captured again.

A failure prints every difference as a JSON path with both values, grouped by path: the
checklist of what is left to match. One server; one Debezium JVM per setting.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.debezium import workload
from tests.debezium.compare import (
    Context,
    Deviation,
    Difference,
    by_topic,
    compare_topic,
    key_text,
    mask_paths,
    payload,
    snapshot_date,
    summary,
)
from tests.debezium.differential import TOPICS, Capture, describe, run_setting
from tests.services.common import ServiceUnavailableError, in_ci

EXPECTED = Path(__file__).resolve().parents[1] / "debezium" / "expected"
UNAVAILABLE = "__debezium_unavailable_value"
WALL_CLOCK = ("ts_ms", "ts_us", "ts_ns")
SOURCE_TIMES = ("source.ts_ms", "source.ts_us", "source.ts_ns")
POSITIONS = ("source.txId", "source.lsn", "source.sequence")

Record = dict[str, Any]


def _is_snapshot_row(record: Record) -> bool:
    envelope = payload(record["value"])
    return envelope is not None and envelope.get("op") == "r"


def _wall_clock(ours: Record, theirs: Record, _: Context) -> None:
    mask_paths(ours, WALL_CLOCK)
    mask_paths(theirs, WALL_CLOCK)


def _snapshot_points(ours: Record, theirs: Record, _: Context) -> None:
    if _is_snapshot_row(theirs):
        for record in (ours, theirs):
            mask_paths(record, SOURCE_TIMES + POSITIONS)


def _version(ours: Record, theirs: Record, _: Context) -> None:
    for record in (ours, theirs):
        source = (payload(record["value"]) or {}).get("source")
        if isinstance(source, dict) and isinstance(source.get("version"), str):
            source["version"] = "<version>"


def _unchanged_toast(ours: Record, theirs: Record, context: Context) -> None:
    # Debezium writes a placeholder for a TOASTed value an update left unchanged; ours must
    # hold the value itself: the one the row last had (Debezium's previous image of the key).
    mine, their = payload(ours["value"]), payload(theirs["value"])
    if not mine or not their:
        return
    key = key_text(theirs)
    for image in ("before", "after"):
        a, b = mine.get(image), their.get(image)
        if not isinstance(a, dict) or not isinstance(b, dict):
            continue
        for column, value in b.items():
            known = context.previous.get(key, {}).get(column)
            if value == UNAVAILABLE and known is not None and a.get(column) == known:
                b[column] = known


def _multi_dimensional_arrays(ours: Record, theirs: Record, _: Context) -> None:
    # Debezium gives one null per row of a 2-D array; ours keeps the rows (the right ones).
    mine, their = payload(ours["value"]), payload(theirs["value"])
    for image in ("before", "after"):
        a = (mine or {}).get(image)
        b = (their or {}).get(image)
        if not isinstance(a, dict) or not isinstance(b, dict):
            continue
        for column, value in b.items():
            rows = a.get(column)
            if _nulls_per_row(value, rows):
                b[column] = rows


def _nulls_per_row(theirs: Any, ours: Any) -> bool:
    # Ours must be the array the workload wrote, with as many rows as Debezium's nulls.
    return (
        isinstance(theirs, list)
        and all(v is None for v in theirs)
        and ours in workload.MULTI_DIMENSIONAL
        and len(ours) == len(theirs)
    )


def _snapshot_dates(ours: Record, theirs: Record, _: Context) -> None:
    # Debezium's snapshots read a date through JDBC (java.sql.Date), which drops a BC date's
    # era and overflows infinity; its streaming, and ours everywhere, keep them.
    if not _is_snapshot_row(theirs):
        return
    mine, their = payload(ours["value"]), payload(theirs["value"])
    for image in ("before", "after"):
        a = (mine or {}).get(image)
        b = (their or {}).get(image)
        if not isinstance(a, dict) or not isinstance(b, dict):
            continue
        for column, value in b.items():
            dropped = snapshot_date(a.get(column))
            if dropped is not None and type(dropped) is type(value) and dropped == value:
                b[column] = a[column]


#: The one list of what may differ from Debezium, and why. Anything else is a failure.
DEVIATIONS: list[Deviation] = [
    Deviation(
        "wall-clock times",
        "the envelope's ts_ms/ts_us/ts_ns are when each connector processed the change",
        _wall_clock,
    ),
    Deviation(
        "snapshot points",
        "snapshot rows (op r, initial and incremental): source.ts_*, txId, lsn and sequence. "
        "Each connector's initial snapshot reads at its own slot's consistent point (two slots "
        "are never created at one LSN, and the snapshot transactions are two transactions), and "
        "each re-snapshot reads its chunks at its own watermarks; the values are masked, their "
        "types and presence still compared",
        _snapshot_points,
    ),
    Deviation("source.version", "our version, not Debezium's", _version),
    Deviation(
        "unchanged TOAST",
        "we fill in the value; Debezium writes __debezium_unavailable_value",
        _unchanged_toast,
    ),
    Deviation(
        "multi-dimensional arrays",
        "we keep the values; Debezium writes one null per row",
        _multi_dimensional_arrays,
    ),
    Deviation(
        "dates in snapshot rows",
        "infinity, -infinity and BC dates are what Debezium streams (its sentinels "
        "-5877611-06-21/-22, the proleptic year); its snapshots (initial and incremental) write "
        "a BC date as the same date AD and an infinity as an overflowed day",
        _snapshot_dates,
    ),
]


@pytest.fixture(scope="module", params=list(workload.SETTINGS))
def capture(
    request: pytest.FixtureRequest, pg_server: Any, tmp_path_factory: Any
) -> Iterator[Capture]:
    """One run of the workload through Debezium and ``cdc`` for one setting."""
    setting = request.param
    pg_server.start()
    workdir = tmp_path_factory.mktemp(f"diff-{setting}")
    try:
        yield run_setting(pg_server, setting, workdir)
    except ServiceUnavailableError as exc:
        if in_ci():
            pytest.fail(f"Debezium missing in CI: {exc}", pytrace=False)
        pytest.skip(str(exc))


def _compare(ours: list[Record], theirs: list[Record]) -> list[Difference]:
    mine, their = by_topic(ours, TOPICS), by_topic(theirs, TOPICS)
    return [d for t in TOPICS for d in compare_topic(t, mine[t], their[t], DEVIATIONS)]


def _report(capture: Capture, phases: tuple[str, ...], differences: list[Difference]) -> str:
    lines = [f"setting {capture.setting}, {'+'.join(phases)}: {summary(differences)}"]
    if capture.error:
        lines.append(f"the run failed: {capture.error}")
    lines.append("all differences:")
    lines += [f"  {d.line()}" for d in differences]
    for side, records in (("ours", capture.ours), ("debezium", capture.debezium)):
        held = [r for p in phases for r in records.phases.get(p, [])]
        lines.append(f"{side} wrote:\n{describe(held)}")
    return "\n".join(lines)


def _check(capture: Capture, *phases: str) -> None:
    ours = [r for p in phases for r in capture.ours.phases.get(p, [])]
    theirs = [r for p in phases for r in capture.debezium.phases.get(p, [])]
    differences = _compare(ours, theirs)
    assert theirs, f"Debezium wrote nothing in {phases}: {capture.error}"
    assert not differences and capture.error is None, _report(capture, phases, differences)


def test_snapshot_and_stream_equal_debezium(capture: Capture) -> None:
    """The initial snapshot and every streamed change: the same records, in the same order."""
    _check(capture, "snapshot", "stream")


def test_online_resnapshot_equals_debezium(capture: Capture) -> None:
    """The re-snapshot rows: op r, source.snapshot "incremental", the rows as they are now."""
    _check(capture, "resnapshot")
    rows = capture.debezium.phases["resnapshot"]
    assert len(rows) == workload.resnapshot_records(values=True)
    assert all(
        (payload(r["value"]) or {}).get("source", {}).get("snapshot") == "incremental" for r in rows
    )


def _mask_positions(*records: Record) -> None:
    for record in records:
        mask_paths(record, SOURCE_TIMES + POSITIONS)


#: Debezium against its own earlier capture: what changes from run to run.
RUN_SPECIFIC: list[Deviation] = [
    DEVIATIONS[0],
    Deviation(
        "positions",
        "txId, lsn, sequence and commit times depend on the database's history",
        lambda a, b, _: _mask_positions(a, b),
    ),
]


def test_debezium_still_writes_the_captured_records(capture: Capture) -> None:
    """Debezium's records now equal ``expected/<setting>.jsonl`` (positions and times masked):
    the captured files the value and shape work is built against are still current."""
    files = (
        EXPECTED / f"{capture.setting}.jsonl",
        EXPECTED / "values" / f"{capture.setting}.jsonl",
    )
    lines = [line for path in files for line in path.read_text(encoding="utf-8").splitlines()]
    expected = [json.loads(line) for line in lines]
    live = capture.debezium.all()
    mine, their = by_topic(live, TOPICS), by_topic(expected, TOPICS)
    differences = [d for t in TOPICS for d in compare_topic(t, mine[t], their[t], RUN_SPECIFIC)]
    report = "\n".join(d.line() for d in differences)
    # Here "ours" is the live Debezium and "debezium" the captured file.
    assert not differences, f"{summary(differences)}\n{report}"
