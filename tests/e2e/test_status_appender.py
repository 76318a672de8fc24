"""``cdc status`` names the embedded log's appender and why it was chosen, and a command that
opens the log logs that choice once, as ``native.selected``."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.e2e.cli_helpers import cdc


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


def test_status_shows_the_appender_switched_off_and_why(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    human = cdc("status", str(pipeline), cwd=tmp_path, env={"CDC_NATIVE": "0"})
    assert human.returncode == 0, human.stderr
    assert "appender: python (CDC_NATIVE=0)" in human.stdout
    fields = {"component": "log_appender", "implementation": "python", "reason": "CDC_NATIVE=0"}
    [event] = _selected(human.stderr)  # logged once, though status opens the log and reads it
    assert fields.items() <= event.items()
    result = cdc("status", str(pipeline), "--json", cwd=tmp_path, env={"CDC_NATIVE": "0"})
    assert result.returncode == 0, result.stderr
    report = orjson.loads(result.stdout)
    assert report["log_appender"] == {"implementation": "python", "reason": "CDC_NATIVE=0"}


def test_status_shows_the_appender_this_install_runs(tmp_path: Path) -> None:
    from cdc.log.embedded import appender

    result = cdc("status", str(_pipeline(tmp_path)), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout)["log_appender"] == appender.SELECTION._asdict()
