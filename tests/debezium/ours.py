"""Our side of the differential run: ``cdc run`` on a pipeline file, as a user runs it.

:class:`CdcRun` writes a pipeline file (``name: dbz`` so its topics are Debezium's, its own
slot and publication, the embedded log in the run's folder, the setting's ``envelope:`` block),
runs ``cdc run`` in a child process, reads the topics back through the embedded log's API and
asks for online re-snapshots with ``cdc snapshot FILE --table T --wait``. The DSN reaches the
child through the environment, never the file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded.store import DB_FILE
from cdc.testing import WaitTimeout, wait_until
from tests.services.common import ServiceError, tail

__all__ = ["PIPELINE", "CdcRun", "pipeline_file"]

#: Debezium's ``topic.prefix`` in the harness, so topic names and ``source.name`` agree.
PIPELINE = "dbz"
DSN_VAR = "CDC_DIFF_PG_DSN"
REPO_ROOT = Path(__file__).resolve().parents[2]


def pipeline_file(tables: Sequence[str], slot: str, envelope: Mapping[str, Any]) -> dict[str, Any]:
    """The pipeline file's content: the source, our slot and publication, the envelope."""
    return {
        "version": 1,
        "name": PIPELINE,
        "source": {
            "type": "postgres",
            "dsn": "${" + DSN_VAR + "}",
            "tables": list(tables),
            "snapshot": "initial",
            # One reader, as Debezium's snapshot has: tables are then read one after the other in
            # their listed order, and so marked first/last. With more (the default 2) they are
            # read at once and marked in the order their rows reach the log (README: differences).
            "snapshot_workers": 1,
            "slot": slot,
            "publication": slot,
        },
        "log": {"type": "embedded", "path": "log", "partitions": 1},
        "envelope": dict(envelope),
    }


class CdcRun:
    """``cdc run`` of one pipeline in a child process, and its topics as parsed records.

    Attributes:
        workdir: The run's folder: pipeline file, embedded log, ``cdc.log``.
        file: The pipeline file.
    """

    def __init__(self, dsn: str, content: Mapping[str, Any], workdir: Path) -> None:
        self.workdir = workdir
        self.file = workdir / "pipeline.yaml"
        self.file.write_text(yaml.safe_dump(dict(content), sort_keys=False), encoding="utf-8")
        self.log_file = workdir / "cdc.log"
        self._env = {**os.environ, DSN_VAR: dsn, "PYTHONPATH": _pythonpath()}
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: EmbeddedLog | None = None

    def start(self) -> None:
        """Starts ``cdc run FILE`` (its log lines go to ``cdc.log``)."""
        with self.log_file.open("ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "cdc.cli.main", "run", str(self.file)],
                cwd=self.workdir,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def records(self, topic: str) -> list[dict[str, Any]]:
        """Every record of ``topic`` so far, in offset order: ``{"topic", "key", "value"}``."""
        if not (self.workdir / "log" / DB_FILE).exists():
            return []  # opening it would create it under the child's feet
        if self._log is None:
            self._log = EmbeddedLog(self.workdir / "log")
        if topic not in {t.name for t in self._log.topics()}:
            return []
        out: list[dict[str, Any]] = []
        for partition in sorted(self._log.end_offsets(topic)):
            offset = 0
            while batch := self._log.read(topic, partition, offset, 1000):
                out += [_parsed(r.topic, r.key, r.value) for r in batch]
                offset = batch[-1].offset + 1
        return out

    def wait(self, what: str, done: Callable[[], bool], timeout_s: float) -> None:
        """Waits until ``done()``; fails with the end of ``cdc.log`` if the run exits first."""

        def ended() -> bool:
            if done():
                return True
            if self._proc is not None and self._proc.poll() is not None:
                raise ServiceError(f"cdc run exited {self._proc.returncode}: {self.log_tail()}")
            return False

        try:
            wait_until(ended, timeout_s, 0.2, describe=what)
        except WaitTimeout:
            raise ServiceError(
                f"cdc: {what} not after {timeout_s:.0f} s: {self.log_tail()}"
            ) from None

    def snapshot(self, table: str, timeout_s: float) -> None:
        """Re-snapshots ``table`` online (``cdc snapshot FILE --table T --wait``)."""
        argv = [sys.executable, "-m", "cdc.cli.main", "snapshot", str(self.file), "--table", table]
        argv += ["--wait", "--timeout-s", str(timeout_s)]
        done = subprocess.run(
            argv,
            cwd=self.workdir,
            env=self._env,
            capture_output=True,
            text=True,
            timeout=timeout_s + 30,
        )
        if done.returncode != 0:
            raise ServiceError(
                f"cdc snapshot --table {table} exited {done.returncode}:\n"
                f"{done.stdout}{done.stderr}\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 40) -> str:
        return "\n" + tail(self.log_file, lines)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """Stops ``cdc run`` with SIGTERM (a clean stop), killing it if it hangs."""
        if self._log is not None:
            self._log.close()
            self._log = None
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        return proc.returncode

    def __enter__(self) -> CdcRun:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _parsed(topic: str, key: bytes | None, value: bytes | None) -> dict[str, Any]:
    # The stdlib parser, as for Debezium's lines: both sides' numbers parse the same way.
    return {
        "topic": topic,
        "key": None if key is None else json.loads(key),
        "value": None if value is None else json.loads(value),
    }


def _pythonpath() -> str:
    # The child imports this checkout's code, whatever an editable install elsewhere points at.
    return os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
