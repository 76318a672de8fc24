"""One differential run: the workload captured at once by the real Debezium and by ``cdc run``.

For one setting, on its own database of a shared PostgreSQL: ``cdc run`` starts first and
snapshots (its own slot and publication); then Debezium starts (its own slot, publication and
signal table) and snapshots; then the workload's changes stream to both; then each re-snapshots
both tables online (``cdc snapshot --table``; Debezium's ``execute-snapshot`` signal). Our
snapshot is done before Debezium's slot exists, so our watermarks never reach its stream.

The records of each side are kept per phase (``snapshot``, ``stream``, ``resnapshot``), split by
when they arrived, not by what they say: a wrong ``source.snapshot`` cannot hide a record. A
phase that fails (a timeout, a runner that exited) ends the run; what arrived until then is
kept and the error recorded, so the comparison still shows every difference seen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.debezium import workload
from tests.debezium.compare import payload
from tests.debezium.ours import PIPELINE, CdcRun, pipeline_file
from tests.services.common import ServiceError
from tests.services.debezium import DebeziumRun

PHASES = ("snapshot", "stream", "resnapshot")
TOPICS = tuple(f"{PIPELINE}.{t}" for t in workload.CAPTURED)
#: Budgets: the JVM's start on a loaded 2-core machine dominates.
START_S = 180.0
PHASE_S = 90.0

Record = dict[str, Any]
Reader = Callable[[], list[Record]]


@dataclass
class Side:
    """One side's records of the table topics, per phase, in arrival order."""

    phases: dict[str, list[Record]] = field(default_factory=dict)

    def all(self) -> list[Record]:
        return [r for phase in PHASES for r in self.phases.get(phase, [])]


@dataclass
class Capture:
    """Both sides of one setting's run."""

    setting: str
    dbname: str
    ours: Side = field(default_factory=Side)
    debezium: Side = field(default_factory=Side)
    error: str | None = None


def table_records(records: list[Record]) -> list[Record]:
    """Only the table topics' records (Debezium may also write ``dbz.message`` and others)."""
    return [r for r in records if r["topic"] in TOPICS]


def has_key(records: list[Record], key: dict[str, Any]) -> bool:
    """True once a record of ``key`` (payload, with or without a schema) is there."""
    for record in records:
        k = record["key"]
        if isinstance(k, dict) and set(k) == {"schema", "payload"}:
            k = k["payload"]
        if k == key:
            return True
    return False


def run_setting(pg: Any, setting: str, workdir: Path) -> Capture:
    """Runs the workload for ``setting`` through both, and returns what each wrote."""
    dbname = f"dbz_{setting}"
    pg.drop_database(dbname)  # a run killed half-way may have left it
    pg.create_database(dbname)
    dsn = pg.dsn_for(dbname=dbname)
    capture = Capture(setting, dbname)
    try:
        workload.prepare(dsn)
        _run(capture, dsn, workdir)
    finally:
        pg.drop_database(dbname)  # its slots first
    # Both sides' records, for a look after a failure (CI keeps the test's temp dir).
    dump = {
        "error": capture.error,
        "ours": capture.ours.phases,
        "debezium": capture.debezium.phases,
    }
    (workdir / "capture.json").write_text(json.dumps(dump, indent=1), encoding="utf-8")
    return capture


def _run(capture: Capture, dsn: str, workdir: Path) -> None:
    setting = capture.setting
    (workdir / "ours").mkdir()
    (workdir / "debezium").mkdir()
    content = pipeline_file(workload.CAPTURED, f"cdc_{setting}", workload.envelope_block(setting))
    props = workload.debezium_properties(setting, f"dbz_{setting}")
    with CdcRun(dsn, content, workdir / "ours") as ours:
        got_ours = lambda: table_records([r for t in TOPICS for r in ours.records(t)])  # noqa: E731
        with DebeziumRun(dsn, props, workdir / "debezium") as dbz:
            got_dbz = lambda: table_records(dbz.records())  # noqa: E731
            phases = _Phases(capture, got_ours, got_dbz)
            try:
                _steps(phases, ours, dbz, dsn)
            except ServiceError as exc:
                capture.error = str(exc)
            phases.close()


def _steps(phases: _Phases, ours: CdcRun, dbz: DebeziumRun, dsn: str) -> None:
    snap = workload.snapshot_records(values=True)
    ours.wait("the snapshot", lambda: len(phases.ours()) >= snap, START_S)
    dbz.wait_streaming(dsn, START_S)
    dbz.wait_until("the snapshot", lambda: len(phases.dbz()) >= snap, PHASE_S)
    phases.end("snapshot")
    workload.stream(dsn, values=True)
    last = workload.LAST_KEY
    ours.wait("the last change", lambda: has_key(phases.ours(), last), PHASE_S)
    dbz.wait_until("the last change", lambda: has_key(phases.dbz(), last), PHASE_S)
    # A window, not a wait: anything one side writes after the last change (it should be
    # nothing) must land in this phase to be compared; no event marks "nothing more came".
    time.sleep(1.0)
    phases.end("stream")
    for table in workload.CAPTURED:
        ours.snapshot(table, PHASE_S)
    workload.signal_incremental_snapshot(dsn)
    rows = workload.resnapshot_records(values=True)
    dbz.wait_until("the re-snapshot", lambda: len(phases.dbz()) >= rows, PHASE_S)
    time.sleep(1.0)  # the same window: any extra record of the re-snapshot is compared
    phases.end("resnapshot")


class _Phases:
    """Cuts each side's records into phases at the moments the run says a phase ended.

    The cut is per topic: a side's topics are read one after the other, so a count over all of
    them would move a record of one topic into another's phase.
    """

    def __init__(self, capture: Capture, ours: Reader, dbz: Reader) -> None:
        self.capture = capture
        self._read = {"ours": ours, "debezium": dbz}
        self._cuts: dict[str, dict[str, int]] = {"ours": {}, "debezium": {}}
        self._ended: list[str] = []

    def since(self, side: str) -> list[Record]:
        """The side's records after the last cut."""
        cuts = self._cuts[side]
        out: list[Record] = []
        for topic, records in _per_topic(self._read[side]()).items():
            out += records[cuts.get(topic, 0) :]
        return out

    def ours(self) -> list[Record]:
        return self.since("ours")

    def dbz(self) -> list[Record]:
        return self.since("debezium")

    def end(self, phase: str) -> None:
        for side, target in (("ours", self.capture.ours), ("debezium", self.capture.debezium)):
            cuts = self._cuts[side]
            held: list[Record] = []
            for topic, records in _per_topic(self._read[side]()).items():
                held += records[cuts.get(topic, 0) :]
                cuts[topic] = len(records)
            target.phases[phase] = held
        self._ended.append(phase)

    def close(self) -> None:
        """Keeps what arrived in a phase that did not end (a failed run), under its name."""
        left = [p for p in PHASES if p not in self._ended]
        if left:
            self.end(left[0])


def _per_topic(records: list[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {t: [] for t in TOPICS}
    for record in records:
        if record["topic"] in out:
            out[record["topic"]].append(record)
    return out


def describe(records: list[Record]) -> str:
    """One line per record (op, key): what a phase held, for a failure message."""
    out = []
    for r in records:
        envelope = payload(r["value"])
        key = r["key"].get("payload", r["key"]) if isinstance(r["key"], dict) else r["key"]
        out.append(
            f"  {r['topic']} {envelope.get('op') if envelope else 'tombstone'} {json.dumps(key)}"
        )
    return "\n".join(out)
