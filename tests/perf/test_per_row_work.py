"""The hot paths' work per row stays within the budgets recorded in tests/perf/budgets.json.

Counted, not timed (a shared machine's clock varies; a fixed input's calls do not): see
:mod:`tests.perf.paths` for what each path runs and :mod:`tests.perf.counting` for how. A
failure says the measured figure, the budget and the most called functions. A change that adds
work per row raises the budget in the same commit, with its reason; one that saves work lowers
it, or this test fails too.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.perf import budget
from tests.perf.measure import measure


def _check(name: str, figures: dict[str, Any]) -> None:
    found = budget.problems(name, figures, budget.load())
    assert not found, "\n".join([*found, budget.where_calls_go(figures)])


def test_the_streaming_path_stays_within_its_budget(pg_db: str) -> None:
    _check("stream", measure("stream", pg_db))


def test_the_snapshot_path_stays_within_its_budget(pg_db: str) -> None:
    _check("snapshot", measure("snapshot", pg_db))


def test_the_duckdb_sink_path_stays_within_its_budget() -> None:
    _check("duckdb", measure("duckdb"))


def test_every_path_has_a_budget_with_its_reason() -> None:
    budgets = budget.load()
    assert set(budgets["paths"]) == {"stream", "snapshot", "duckdb"}
    for name, entry in budgets["paths"].items():
        assert set(budget.KINDS) <= set(entry), name
        assert entry.get("reason", "").strip(), f"{name}: a budget says why it is what it is"
    # One more call a row must fail: the tolerance stays under one.
    assert 0 < budgets["tolerance"] < 1 and budgets["lower_below"] > budgets["tolerance"]


BUDGETS: dict[str, Any] = {
    "tolerance": 0.25,
    "lower_below": 1.0,
    "paths": {"p": {"python_calls_per_row": 100.0, "builtin_calls_per_row": 40.0, "reason": "x"}},
}


OVER = (
    "a change that adds per-row work must raise the budget in tests/perf/budgets.json in the same "
    "commit, with its reason"
)


@pytest.mark.parametrize(
    ("python", "builtin", "expected"),
    [
        (100.2, 39.5, []),  # within the tolerance, and not far below
        (101.0, 40.0, ["measured 101.00 Python calls/row, budget 100.00", OVER]),
        (100.0, 40.3, ["measured 40.30 builtin calls/row, budget 40.00", OVER]),
        (98.9, 40.0, ["measured 98.90 Python calls/row, far below the budget", "lower the"]),
    ],
)
def test_one_more_call_a_row_fails_and_a_saving_must_lower_the_budget(
    python: float, builtin: float, expected: list[str]
) -> None:
    figures: dict[str, Any] = {"python_calls_per_row": python, "builtin_calls_per_row": builtin}
    found = budget.problems("p", figures, BUDGETS)
    assert len(found) == (1 if expected else 0)
    assert all(text in found[0] for text in expected)


def test_a_library_of_another_version_is_named() -> None:
    figures: dict[str, Any] = {"python_calls_per_row": 101.0, "builtin_calls_per_row": 40.0}
    figures["versions"] = {"python": "3.11.7", "psycopg": "3.4.0"}
    budgets = {**BUDGETS, "recorded_with": {"python": "3.11.7", "psycopg": "3.3.9"}}
    (found,) = budget.problems("p", figures, budgets)
    assert found.endswith("(recorded with other versions: psycopg 3.3.9 -> 3.4.0)")
