"""Running ``cdc`` as a user does: a real process, real signals, real files."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from cdc.testing import wait_until

# Subprocesses import this checkout's code, whatever an editable install elsewhere points at.
REPO_ROOT = str(Path(__file__).resolve().parents[2])


def cdc_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``cdc`` subprocess: this checkout first on ``PYTHONPATH``."""
    path = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **(extra or {}), "PYTHONPATH": path}


def cdc(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run a ``cdc`` command to completion."""
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli.main", *args],
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=timeout,
        env=cdc_env(env),
    )


def status_json(pipeline: Path, cwd: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``cdc status FILE --json`` prints, built in this process by the command's own
    function (:func:`cdc.cli.status.status_report`) from the file as the command loads it, in
    ``cwd`` and with ``env`` over this environment.

    For the tests that read it over and over while they wait (for a sink to catch up): a
    ``cdc status`` process costs about 1.2 s of CPU, most of it importing, and those polls
    were about a third of the end-to-end tests' CPU (2026-12-07). The command itself is tested
    as a process (``cdc("status", ...)``).
    """
    from cdc.cli.status import status_report
    from cdc.config import pipeline as config
    from cdc.log.factory import open_log

    with contextlib.chdir(cwd):
        loaded = config.load(pipeline, {**os.environ, **(env or {})})
        log = open_log(loaded)
        try:
            report = status_report(log, loaded)
        finally:
            log.close()
    found: dict[str, Any] = orjson.loads(orjson.dumps(report))  # as the command prints it
    return found


def start_run(
    pipeline: Path, cwd: Path, env: dict[str, str] | None = None, *extra: str
) -> subprocess.Popen[str]:
    """Start ``cdc run`` in the background, logs to ``cwd/run.log``."""
    log = (cwd / "run.log").open("a")
    return subprocess.Popen(
        [sys.executable, "-m", "cdc.cli.main", "run", str(pipeline), *extra],
        cwd=cwd,
        text=True,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=cdc_env(env),
    )


def stop(
    process: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 10
) -> tuple[int, float]:
    """Send ``sig`` and wait; returns (exit code, seconds it took)."""
    started = time.monotonic()
    process.send_signal(sig)
    code = process.wait(timeout)
    return code, time.monotonic() - started


def tail_all(pipeline: Path, topic: str, cwd: Path) -> list[dict[str, Any]]:
    """Every record of ``topic`` through ``cdc tail``."""
    result = cdc("tail", str(pipeline), topic, "--from-beginning", "--timeout-s", "0.5", cwd=cwd)
    assert result.returncode == 0, result.stderr
    return [orjson.loads(line) for line in result.stdout.splitlines() if line]


def topic_records(pipeline: Path, topic: str, cwd: Path, env: dict[str, str] | None = None) -> int:
    """Records in ``topic``, all partitions, as ``cdc status --json`` reports its end offsets."""
    topics = status_json(pipeline, cwd, env)["topics"]
    return sum(int(o) for t in topics if t["topic"] == topic for o in t["end_offsets"].values())


def kill_mid_workload(
    process: subprocess.Popen[str],
    writer: Any,
    pipeline: Path,
    topic: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    records: int = 50,
) -> None:
    """SIGKILL ``cdc run`` once it is provably mid-work.

    Mid-work: the run has put ``records`` of the workload into ``topic`` while the ``writer``
    thread is still writing, so the source is behind it. A kill before or after would test
    nothing, and fails here instead.
    """
    wait_for(
        lambda: topic_records(pipeline, topic, cwd, env) >= records or not writer.is_alive(),
        timeout=60,
        process=process,
        log=cwd / "run.log",
    )
    assert writer.is_alive(), f"the workload ended before {records} records reached {topic}"
    stop(process, signal.SIGKILL)


def latest_per_key(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The state a compacted topic describes: the last value per key (tombstones drop it)."""
    state: dict[str, Any] = {}
    for record in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        key = orjson.dumps(record["key"]).decode()
        if record["value"] is None:
            state.pop(key, None)
        else:
            state[key] = record["value"]["after"]
    return state


def wait_for(
    predicate: Any,
    timeout: float = 60,
    interval: float = 0.1,
    process: subprocess.Popen[str] | None = None,
    log: Path | None = None,
    last_seen: dict[str, Any] | None = None,
) -> None:
    """Wait until ``predicate()`` holds; fail at once if ``process`` (``cdc run``) has exited.

    On failure the message carries what the predicate last saw (``last_seen``, which it fills)
    and the tail of ``log``: a CI run leaves nothing else behind.
    """

    def met() -> bool:
        if predicate():
            return True
        if process is not None and process.poll() is not None:
            raise AssertionError(f"cdc run exited with {process.returncode}{_tail(log)}")
        return False

    wait_until(met, timeout, interval, describe=lambda: f"last seen {last_seen}{_tail(log)}")


def _tail(log: Path | None, size: int = 6000) -> str:
    if log is None or not log.exists():
        return ""
    return "\n--- end of " + str(log) + " ---\n" + log.read_text()[-size:]


def http_get(url: str) -> tuple[int, bytes]:
    """``(status, body)`` of a GET (an HTTP error's own status and body); ``(0, b"")`` while
    nothing listens yet."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""
