"""What ``cdc verify`` prints for people (``--json`` prints :meth:`TableComparison.to_json`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import click

from cdc.verify.compare import UNREADABLE
from cdc.verify.comparison import TableComparison

STATES = {
    "ok": "ok",
    "different": "DIFFERENT",
    "lagging": "LAGGING",
    "unverifiable": "NOT VERIFIABLE",
}


def print_verify(results: list[TableComparison]) -> None:
    """One line per sink and table, then what differs, or how far a lagging sink is behind;
    then the summary line (:func:`summary_line`)."""
    for r in results:
        state = STATES[r.state]
        if r.lag is not None:
            click.echo(f"{r.sink:<12} {r.table:<30} {state:<9} {_lag_line(r.lag)}")
            continue
        if r.unverifiable is not None:
            click.echo(f"{r.sink:<12} {r.table:<30} {state:<9} {r.unverifiable}")
        else:
            click.echo(
                f"{r.sink:<12} {r.table:<30} {state:<9} source {r.source_count} rows "
                f"({r.source_checksum})  sink {r.sink_count} rows ({r.sink_checksum})"
            )
        if r.note:
            click.echo(f"    note: {r.note}")
        for label, keys in (
            ("missing in sink", r.missing),
            ("extra in sink", r.extra),
            ("different", r.different),
        ):
            if keys:
                click.echo(f"    {label}: {', '.join(map(str, keys))}")
        for detail in r.details:
            for column, values in detail["columns"].items():
                click.echo(
                    f"    {detail['key']} {column}: source {values['source']!r}, "
                    f"sink {values['sink']!r}"
                )
    click.echo(summary_line(results))


def summary_line(results: list[TableComparison]) -> str:
    """``verify: 3 of 4 tables agree; 1 sink not verifiable (files: jsonl sinks cannot be
    read back); exit 1``: what was not verified is said here, not only in its own line.

    A sink none of whose tables could be compared, for one reason, is counted as a sink;
    other tables not verified are counted as tables. Exit 0 only when every table compared
    agrees and nothing was left uncompared (LAGGING or NOT VERIFIABLE both exit 1).
    """
    counts = Counter(r.state for r in results)
    total = len(results)
    parts = [f"{counts['ok']} of {total} table{_s(total)} agree{'s' if total == 1 else ''}"]
    parts += [f"{counts[s]} {STATES[s]}" for s in ("different", "lagging") if counts[s]]
    whole, tables = _unverifiable(results)
    if whole:
        named = "; ".join(f"{sink}: {reason}" for sink, reason in whole.items())
        parts.append(f"{len(whole)} sink{_s(len(whole))} not verifiable ({named})")
    if tables:
        parts.append(f"{tables} table{_s(tables)} NOT VERIFIABLE")
    code = 0 if all(r.ok for r in results) else 1
    return f"verify: {'; '.join(parts)}; exit {code}"


def _unverifiable(results: list[TableComparison]) -> tuple[dict[str, str], int]:
    """The sinks whose every table is unverifiable for one reason (with it), and how many
    other tables are unverifiable."""
    reasons: dict[str, set[str | None]] = {}
    for r in results:  # a side that cannot be read back is the sink's; other reasons a table's
        unreadable = r.unverifiable is not None and r.unverifiable.endswith(UNREADABLE)
        reasons.setdefault(r.sink, set()).add(r.unverifiable if unreadable else None)
    whole = {
        sink: next(iter(found))
        for sink, found in reasons.items()
        if len(found) == 1 and None not in found
    }
    tables = sum(1 for r in results if r.unverifiable is not None and r.sink not in whole)
    return {sink: str(reason) for sink, reason in whole.items()}, tables


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _lag_line(lag: dict[str, Any]) -> str:
    """``N records behind on TOPIC (partition p: committed c of end e, ...)``, and the reason
    when an error stopped the sink; not compared, as every record in flight would differ."""
    partitions = ", ".join(
        f"partition {p}: committed {v['committed']} of {v['end']}"
        for p, v in sorted(lag["partitions"].items(), key=lambda item: int(item[0]))
    )
    line = f"{lag['records']} records behind on {lag['topic']}"
    line += f" ({partitions})" if partitions else ""
    if lag.get("rebuilding"):
        line += f"; rebuilding the table after reset {lag['rebuilding']}"
    line += "; not compared"
    if lag.get("sink_state") == "stopped":
        line += f"; the sink is STOPPED: {lag.get('reason')}"
    return line
