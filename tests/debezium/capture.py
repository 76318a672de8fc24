"""Capture the real Debezium's records for one tricky workload, under five settings combinations.

Starts a throwaway PostgreSQL (Debian's 15, ``wal_level=logical``), and for each setting of
``workload.SETTINGS`` a fresh database holding ``workload``'s two tables of every common type
(composite primary key; REPLICA IDENTITY DEFAULT and FULL) and its values table (every form of
``numeric`` and ``timestamptz(p)``, and a truncate). Debezium 3.6.1 then snapshots them and
streams ``workload.stream``'s changes, then re-snapshots the tables (an incremental snapshot,
asked for by a row in its signal table). Its records go to ``expected/<setting>.jsonl`` (the
values table's to ``expected/values/<setting>.jsonl``), each line exactly as the runner wrote
it (the JsonConverter's bytes). The differential test checks that Debezium still writes these::

    .venv/bin/python tests/debezium/capture.py            # every setting
    .venv/bin/python tests/debezium/capture.py readable   # one

The snapshot rows' ``ts_ms``/``ts_us``/``ts_ns``, ``source.ts_*``, ``txId``, ``lsn`` and
``sequence`` differ from run to run; so do the streamed ones' times and positions.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.debezium.workload import (  # noqa: E402
    CAPTURED,
    QUALIFIED,
    SETTINGS,
    VALUES_TABLE,
    debezium_properties,
    prepare,
    resnapshot_records,
    signal_incremental_snapshot,
    snapshot_records,
    stream,
    streamed_records,
)
from tests.services.debezium import DebeziumRun  # noqa: E402
from tests.services.postgres import LocalPostgres  # noqa: E402

HERE = Path(__file__).parent
EXPECTED = HERE / "expected"


def capture(pg: LocalPostgres, setting: str) -> Path:
    """Runs one setting on its own database and writes its expected file: the records of the
    two tables (Debezium also writes its signal table's rows, the requests and watermarks of
    the re-snapshot, with random ids; they are left out)."""
    dbname = pg.create_database(f"dbz_{setting}")
    dsn = pg.dsn_for(dbname=dbname)
    prepare(dsn)
    props = debezium_properties(setting, f"dbz_{setting}")
    snapshot = snapshot_records(values=True)
    streamed = snapshot + streamed_records(props, values=True)
    expect = streamed + resnapshot_records(values=True)
    with (
        tempfile.TemporaryDirectory(prefix=f"dbz-{setting}-") as tmp,
        DebeziumRun(dsn, props, tmp) as run,
    ):
        run.wait_streaming(dsn, 180)
        run.wait_until("the snapshot", lambda: len(_tables(run)) >= snapshot, 60)
        stream(dsn, values=True)
        run.wait_until("the stream", lambda: len(_tables(run)) >= streamed, 120)
        signal_incremental_snapshot(dsn)
        run.wait_until("the re-snapshot", lambda: len(_tables(run)) >= expect, 120)
        lines = _tables(run)[:expect]
    out = EXPECTED / f"{setting}.jsonl"
    _write(out, _of(lines, QUALIFIED))
    _write(EXPECTED / "values" / f"{setting}.jsonl", _of(lines, [f"public.{VALUES_TABLE}"]))
    pg.drop_database(dbname)
    return out


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _of(lines: list[str], tables: Sequence[str]) -> list[str]:
    """The lines of ``tables``' topics, exactly as written, in order."""
    topics = {f'"topic":"dbz.{table}"' for table in tables}
    return [line for line in lines if any(line.startswith("{" + t + ",") for t in topics)]


def _tables(run: DebeziumRun) -> list[str]:
    """The lines of the captured tables' topics, exactly as written."""
    return _of(run.lines(), CAPTURED)


def main(argv: list[str]) -> int:
    settings = argv or list(SETTINGS)
    with LocalPostgres() as pg:
        for setting in settings:
            out = capture(pg, setting)
            print(f"{out.relative_to(ROOT)}: {len(out.read_text().splitlines())} records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
