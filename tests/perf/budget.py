"""The per-row work budgets recorded in ``tests/perf/budgets.json``, and the check against them.

A figure over its budget by more than the tolerance fails: one more function call a row is
more than the tolerance, so a change that adds per-row work fails until its commit raises the
budget, with its reason. A figure far below its budget fails too, so a saving is locked in by
lowering the budget (and the next regression cannot hide in the slack).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BUDGETS = Path(__file__).resolve().parent / "budgets.json"
RELATIVE = "tests/perf/budgets.json"
#: The figures each path is held to, with how they read in a message.
KINDS = {"python_calls_per_row": "Python calls", "builtin_calls_per_row": "builtin calls"}


def load(path: Path = BUDGETS) -> dict[str, Any]:
    budgets: dict[str, Any] = json.loads(path.read_text())
    return budgets


def problems(name: str, figures: dict[str, Any], budgets: dict[str, Any]) -> list[str]:
    """What is wrong with path ``name``'s measured ``figures`` against ``budgets`` (empty: none).

    Args:
        figures: :meth:`tests.perf.counting.Work.to_json` of one measured run.
        budgets: the budget file's content (:func:`load`).
    """
    entry = budgets["paths"][name]
    over, under = float(budgets["tolerance"]), float(budgets["lower_below"])
    found = []
    for kind, label in KINDS.items():
        measured, budget = float(figures[kind]), float(entry[kind])
        if measured > budget + over:
            found.append(
                f"{name}: measured {measured:.2f} {label}/row, budget {budget:.2f} "
                f"(failing above {budget + over:.2f}): a change that adds per-row work must "
                f"raise the budget in {RELATIVE} in the same commit, with its reason"
            )
        elif measured < budget - under:
            found.append(
                f"{name}: measured {measured:.2f} {label}/row, far below the budget "
                f"{budget:.2f} (failing below {budget - under:.2f}): lower the budget in "
                f"{RELATIVE} to {measured:.2f}, with the reason, so the saving is kept"
            )
    changed = _changed_versions(budgets.get("recorded_with", {}), figures.get("versions", {}))
    return [f"{line} ({changed})" if changed else line for line in found]


def _changed_versions(recorded: dict[str, str], now: dict[str, str]) -> str:
    """What differs from the versions the budgets were recorded with: a library's own calls
    count too, so a new release can move a figure without a change here."""
    changed = [f"{k} {v} -> {now[k]}" for k, v in recorded.items() if now.get(k, v) != v]
    return "recorded with other versions: " + ", ".join(changed) if changed else ""


def where_calls_go(figures: dict[str, Any], lines: int = 12) -> str:
    """The most called functions of a run, per row: where to look first."""
    rows = figures["rows"]
    out = [f"{rows} rows; where the calls go (calls per row, function):"]
    for kind, label in (("top_python", "Python functions"), ("top_builtin", "builtins")):
        out.append(f"  {label}:")
        out += [f"  {calls / rows:8.3f}  {fn}" for fn, calls in figures[kind][:lines]]
    return "\n".join(out)
