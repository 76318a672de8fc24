"""``cdc status`` names the embedded log's appender and why it was chosen, and a command that
opens the log logs that choice once, as ``native.selected``."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.e2e.cli_helpers import cdc, start_run, stop, wait_for


def _pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "gen.yaml"
    path.write_text(
        "version: 1\nname: gen\nsource:\n  type: generator\n  tables: [public.t]\n"
        "  changes: 10\nlog:\n  type: embedded\n"
        "sinks:\n  - name: files\n    type: jsonl\n    path: out/files\n"
    )
    return path


def _selected(stderr: str) -> list[dict[str, object]]:
    events = [orjson.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [event for event in events if event.get("event") == "native.selected"]


NATIVE_OFF = {"CDC_NATIVE": "0"}


def test_run_logs_the_selection_at_info_and_other_commands_do_not(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    run = start_run(pipeline, tmp_path, NATIVE_OFF)
    try:
        # Its signal handlers are set once it says it started: a SIGTERM before is a kill.
        wait_for(lambda: "pipeline.started" in (tmp_path / "run.log").read_text(), 30, process=run)
    finally:
        code, _ = stop(run)
    assert code == 0, (tmp_path / "run.log").read_text()
    [event] = _selected((tmp_path / "run.log").read_text())
    assert (event["level"], event["implementation"]) == ("info", "python")
    for command in (["validate"], ["topics"], ["verify"], ["doctor"]):
        result = cdc(*command, str(pipeline), cwd=tmp_path, env=NATIVE_OFF)
        assert _selected(result.stderr) == [], (command, result.stderr)


def test_status_shows_the_appender_switched_off_and_why(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    human = cdc("status", str(pipeline), cwd=tmp_path, env={"CDC_NATIVE": "0"})
    assert human.returncode == 0, human.stderr
    assert "appender: python (CDC_NATIVE=0)" in human.stdout
    assert _selected(human.stderr) == []  # status's stderr is not a log of the selection
    fields = {"component": "log_appender", "implementation": "python", "reason": "CDC_NATIVE=0"}
    debug = cdc("--log-level", "debug", "status", str(pipeline), cwd=tmp_path, env=NATIVE_OFF)
    [event] = _selected(debug.stderr)  # logged once, though status opens the log and reads it
    assert fields.items() <= event.items() and event["level"] == "debug"
    result = cdc("status", str(pipeline), "--json", cwd=tmp_path, env={"CDC_NATIVE": "0"})
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["log_appender"] == {"implementation": "python", "reason": "CDC_NATIVE=0"}


def test_status_shows_the_appender_this_install_runs(tmp_path: Path) -> None:
    from cdc.log.embedded import appender

    result = cdc("status", str(_pipeline(tmp_path)), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["log_appender"] == appender.SELECTION._asdict()
