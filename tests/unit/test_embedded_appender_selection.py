"""Which appender the embedded log runs, and the reason it gives when the native one is off.

The selection (:func:`cdc.log.embedded.appender.select`) is made once at import; these tests
call it again under changed conditions. Where a condition cannot be produced on this machine
(another Python version), the function that reads it is replaced, and the test says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

import cdc.log.embedded
from cdc.cli.status import appender_report, print_status
from cdc.log.embedded import appender
from tests.services.common import in_ci


def _require_native() -> None:
    if not appender.available():
        if in_ci():
            pytest.fail("the native log appender was not built")
        pytest.skip("the native log appender is not built (no Rust toolchain)")


def test_the_native_appender_runs_where_it_is_built() -> None:
    _require_native()
    assert appender.SELECTION.implementation == "rust"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert appender.SELECTION.reason.startswith(f"CPython {version}, libsqlite3.so.0 ")


def test_cdc_native_0_switches_it_off_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDC_NATIVE", "0")
    library, selection = appender.select()
    assert library is None
    assert selection == appender.Selection("python", "CDC_NATIVE=0")


def test_a_python_outside_the_known_layouts_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulated: this machine runs one of 3.11-3.13, so the interpreter probe pretends 3.14.
    monkeypatch.delenv("CDC_NATIVE", raising=False)
    monkeypatch.setattr(appender, "_interpreter", lambda: ("cpython", (3, 14)))
    library, selection = appender.select()
    assert library is None
    assert selection.implementation == "python"
    assert selection.reason.startswith("Python 3.14 is outside 3.11\u20133.13")


def test_another_interpreter_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulated: the tests run on CPython, so the interpreter probe pretends PyPy.
    monkeypatch.delenv("CDC_NATIVE", raising=False)
    monkeypatch.setattr(appender, "_interpreter", lambda: ("pypy", (3, 11)))
    _, selection = appender.select()
    assert selection.implementation == "python"
    assert selection.reason.startswith("pypy is not CPython")


def test_an_extension_not_built_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulated: the extension is built here; hiding it makes its import fail as it would.
    monkeypatch.delenv("CDC_NATIVE", raising=False)
    monkeypatch.delattr(cdc.log.embedded, "_native", raising=False)
    monkeypatch.setitem(sys.modules, "cdc.log.embedded._native", None)
    library, selection = appender.select()
    assert library is None
    assert selection.implementation == "python"
    assert selection.reason.startswith("not built")


def test_a_missing_symbol_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Real, not simulated: pointed at another library this process loaded (libm), the Rust side
    # finds no sqlite3_step in it, exactly as in a SQLite library that lacks a function.
    _require_native()
    if "libm.so.6" not in Path("/proc/self/maps").read_text():
        pytest.skip("libm.so.6 is not loaded in this process")
    monkeypatch.delenv("CDC_NATIVE", raising=False)
    monkeypatch.setattr(appender, "_LIBRARY", "libm.so.6")
    library, selection = appender.select()
    assert library is None
    assert selection == appender.Selection(
        "python", "symbol sqlite3_step missing from the SQLite library libm.so.6"
    )


def test_the_selection_is_logged_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(appender, "_announced", False)
    with capture_logs() as logs:
        appender.announce("info")  # what cdc run calls first
        appender.announce()  # what opening a pipeline's embedded log calls
    selected = [event for event in logs if event["event"] == "native.selected"]
    assert selected == [
        {
            "event": "native.selected",
            "log_level": "info",
            "component": "log_appender",
            "implementation": appender.SELECTION.implementation,
            "reason": appender.SELECTION.reason,
        }
    ]


def test_other_commands_log_the_selection_at_debug_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(appender, "_announced", False)
    with capture_logs() as logs:
        appender.announce()  # opening the log, in any command but cdc run
    assert [(e["event"], e["log_level"]) for e in logs] == [("native.selected", "debug")]


def test_status_shows_the_appender_and_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(appender, "SELECTION", appender.Selection("python", "CDC_NATIVE=0"))
    report = appender_report()
    assert report == {"implementation": "python", "reason": "CDC_NATIVE=0"}
    source = {"type": "generator", "offsets": {}}
    print_status(
        {"pipeline": "p", "log": "embedded", "source": source, "topics": [], "sinks": []}
        | {"log_appender": report}
    )
    assert "appender: python (CDC_NATIVE=0)" in capsys.readouterr().out


def test_a_build_without_value_frames_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """An extension built before value frames (no ``frame``) would fail every large append:
    executemany runs instead, and the reason says to reinstall."""
    _require_native()
    from cdc.log.embedded import _native  # type: ignore[attr-defined]

    built = _native.Sqlite

    class Old:
        def __init__(self, library: str, module: str) -> None:
            self._new = built(library, module)

        def version(self) -> int:
            return int(self._new.version())

    monkeypatch.setattr(_native, "Sqlite", Old)
    library, reason = appender._open_library()
    assert library is None and "reinstall" in reason
