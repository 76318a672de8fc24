"""Shared by the embedded log's tests: the topic they write, and logs opened and closed for them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdc.log.embedded import EmbeddedLog
from cdc.log.embedded import appender as embedded_native
from tests.services.common import in_ci
from tests.unit.log_suite import read_all

TOPIC = "shop.public.customers"

#: Run a test on the native appender and on ``executemany``.
both_paths = pytest.mark.parametrize("native", [True, False], ids=["native", "executemany"])


def use_appender(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The native appender, or ``executemany`` (the native one is off for this test): call it
    before the test opens its logs, which choose their appender when they open."""
    if native and not embedded_native.available():
        if in_ci():
            pytest.fail("the native log appender was not built")
        pytest.skip("the native log appender is not built (no Rust toolchain)")
    if not native:
        python = embedded_native.PythonAppender()
        monkeypatch.setattr(embedded_native, "choose", lambda conn, database: python)


def opened_logs(tmp_path: Path) -> Iterator[Callable[..., EmbeddedLog]]:
    """Yields an opener of logs under ``tmp_path``; closes every log it opened afterwards."""
    opened: list[EmbeddedLog] = []

    def open_log(partitions: int = 1, **options: object) -> EmbeddedLog:
        log = EmbeddedLog(tmp_path / "log", partitions=partitions, **options)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield open_log
    for log in opened:
        log.close()


def values(log: EmbeddedLog, topic: str = TOPIC) -> list[tuple[int, bytes | None, bytes | None]]:
    """Offset, key and value of every record of ``topic``, in log order."""
    return [(r.offset, r.key, r.value) for r in read_all(log, topic)]
