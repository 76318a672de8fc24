"""What ``cdc verify`` prints for people (``--json`` prints :meth:`TableComparison.to_json`)."""

from __future__ import annotations

from typing import Any

import click

from cdc.verify import TableComparison

STATES = {
    "ok": "ok",
    "different": "DIFFERENT",
    "lagging": "LAGGING",
    "skipped": "skipped",
    "unverifiable": "NOT VERIFIABLE",
}


def print_verify(results: list[TableComparison]) -> None:
    """One line per sink and table, then what differs, or how far a lagging sink is behind."""
    for r in results:
        state = STATES[r.state]
        if r.lag is not None:
            click.echo(f"{r.sink:<12} {r.table:<30} {state:<9} {_lag_line(r.lag)}")
            continue
        if r.unverifiable is not None:
            click.echo(f"{r.sink:<12} {r.table:<30} {state:<9} {r.unverifiable}")
            continue
        click.echo(
            f"{r.sink:<12} {r.table:<30} {state:<9} source {r.source_count} rows "
            f"({r.source_checksum})  sink {r.sink_count} rows ({r.sink_checksum})"
        )
        if r.skipped:
            click.echo(f"    {r.skipped}")
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
