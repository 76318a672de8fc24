"""``cdc verify``'s run: compare, and with ``--repair`` repair what differs and compare again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from cdc.cli.support import EXIT_RUNTIME, emit_json, opened_log
from cdc.cli.verify.repair import (
    Repair,
    differing_keys,
    plan_repairs,
    request_repairs,
    wait_for_repairs,
)
from cdc.verify.comparison import TableComparison

#: How long a repair's re-verification gives the sinks to consume the repair, at least.
REPAIR_SINK_WAIT_S = 60.0


#: Compares (every table of every sink, as the command's options ask) after giving the
#: sinks up to that many seconds to reach the log's end.
Compare = Callable[[float], list[TableComparison]]


@dataclass(frozen=True)
class VerifyOptions:
    """The options of ``cdc verify`` this module acts on (see ``cdc verify --help``)."""

    wait_for_sinks_s: float = 0.0
    repair: bool = False
    repair_timeout_s: float = 300.0


def run_verify(pipeline: Any, compare: Compare, options: VerifyOptions, as_json: bool) -> int:
    """Verify (and repair); print the outcome; the exit code: 0 when every table agrees (after
    the repair, with ``--repair``), else 1."""
    results = compare(options.wait_for_sinks_s)
    if not options.repair:
        _print(results, as_json)
        return 0 if all(r.ok for r in results) else EXIT_RUNTIME
    repairs = plan_repairs(pipeline, results)
    after = results
    if repairs:
        _repair(pipeline, results, repairs, options, as_json)
    if any(r.requests for r in repairs.values()):
        after = compare(max(options.wait_for_sinks_s, REPAIR_SINK_WAIT_S))
    if as_json:
        emit_json(
            {
                "repaired": [r.to_json() for r in repairs.values()],
                "before": [r.to_json() for r in results],
                "after": [r.to_json() for r in after],
            }
        )
    else:
        _print_repairs(repairs)
        from cdc.cli.verify.report import print_verify

        print_verify(after)
    return 0 if all(r.ok for r in after) else EXIT_RUNTIME


def _repair(
    pipeline: Any,
    results: list[TableComparison],
    repairs: dict[str, Repair],
    options: VerifyOptions,
    as_json: bool,
) -> None:
    def echo(line: str) -> None:
        click.echo(line, err=as_json)

    request_repairs(pipeline, repairs, differing_keys(results))
    for repair in repairs.values():
        if repair.requests:
            echo(f"repairing {repair.keys} key(s) of {repair.table}: {', '.join(repair.requests)}")
    with opened_log(pipeline) as log:
        wait_for_repairs(log, repairs, options.repair_timeout_s, echo)


def _print_repairs(repairs: dict[str, Repair]) -> None:
    """One line per table and sink: how many keys were repaired, and which."""
    for repair in repairs.values():
        for sink, counts in repair.sinks.items():
            keys = repair.sink_keys.get(sink, [])
            shown = ", ".join(map(str, keys[:20])) + (" ..." if len(keys) > 20 else "")
            click.echo(
                f"repair: {sink:<12} {repair.table:<30} {repair.outcome}: {len(keys)} key(s) "
                f"({counts['missing']} missing, {counts['extra']} extra, "
                f"{counts['different']} different): {shown}"
            )
        if repair.error:
            click.echo(f"    {repair.error}")


def _print(results: list[TableComparison], as_json: bool) -> None:
    if as_json:
        emit_json([r.to_json() for r in results])
    else:
        from cdc.cli.verify.report import print_verify

        print_verify(results)
