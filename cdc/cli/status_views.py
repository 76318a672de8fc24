"""``cdc status``: each live join view (docs/views.md), its topic, the documents it holds, the
source position it has read up to, and how far behind its tables it is.

The lag is its consumer group's committed offsets against its tables' last records, as ``cdc
verify`` and ``cdc_view_lag_records`` read it (:mod:`cdc.views.progress`). The documents are
counted in the view's local store when this machine has it (``None`` elsewhere); the position is
the high-water mark its last batch wrote to its state topic.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from cdc.cli.status_liveness import NOT_RUNNING
from cdc.config.pipeline import Pipeline
from cdc.log.base import Log
from cdc.runtime import heartbeat
from cdc.views import records as out
from cdc.views.progress import (
    input_topics,
    last_counters,
    records_behind,
    stored_documents,
    view_behind,
)
from cdc.views.states import STANDBY


def views_report(
    log: Log, pipeline: Pipeline, found: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One entry per view of the pipeline (none when it declares none). ``found``: the
    pipeline's processes (:func:`cdc.runtime.heartbeat.processes`), whose beats carry the state
    of the views each runs: ``state`` is that (``starting``, ``running``, ``retrying`` or
    ``stopped``, with ``reason``), or ``not running`` when no running process runs the source
    (views run where it does)."""
    if not pipeline.views:
        return []
    existing = {info.name for info in log.topics()}
    report = []
    for view in pipeline.views:
        state = out.state_topic(pipeline.name, view)
        counters = last_counters(log, state) if state in existing else None
        high = (counters or {}).get("high")
        left = view_behind(log, pipeline, view)
        report.append(
            {
                "view": view.name,
                "table": view.table,
                "topic": out.view_topic(pipeline.name, view),
                "group": out.view_group(pipeline.name, view),
                "inputs": input_topics(pipeline, view),
                "documents": stored_documents(
                    pipeline.state_path() / "views" / f"{view.name}.sqlite"
                ),
                "position": high[0] if high else None,  # a number, as cdc_view_position
                "lag": records_behind(left),
                "behind": left,
                **_task_state(found or [], view.name),
            }
        )
    return report


def _task_state(found: list[dict[str, Any]], view: str) -> dict[str, Any]:
    """The state of the process that runs the view; on Kafka, the processes that stand by
    (another holds the view's lease: :mod:`cdc.views.standby`) as ``standbys``, each
    ``<host>:<pid>``, and the state is theirs only while none runs it."""
    said = heartbeat.view_state(found, view)
    if said is not None:
        standbys, runs = [], None
        for process in found:
            state = (process.get("views") or {}).get(view)
            if process["state"] != heartbeat.RUNNING or state is None:
                continue
            if state.get("state") == STANDBY:
                standbys.append(f"{process.get('host')}:{process.get('pid')}")
            elif runs is None:
                runs = state
        chosen = runs or said
        return {"state": chosen.get("state"), "reason": chosen.get("reason"), "standbys": standbys}
    if heartbeat.runs_source(found):  # a process of a version whose beats carry no views
        return {"state": None, "reason": None}
    return {"state": NOT_RUNNING, "reason": "no running process runs the source"}


def print_views(views: list[dict[str, Any]], console: Console) -> None:
    """A line per view, then one per partition it has yet to read to its end."""
    for view in views:
        documents = view["documents"]
        line = f"view {view['view']} -> {view['topic']}: "
        if view.get("state") is not None:
            reason = f" ({view['reason']})" if view.get("reason") else ""
            line += f"{view['state']}{reason}; "
        if view.get("standbys"):
            count = len(view["standbys"])
            line += f"{count} standby: {', '.join(view['standbys'])}; "
        line += (
            "documents not counted (no local store here)"
            if documents is None
            else (f"{documents} document{'' if documents == 1 else 's'}")
        )
        line += f", {view['lag']} record{'' if view['lag'] == 1 else 's'} behind its tables"
        if view["position"] is not None:
            line += f"; read up to source position {view['position']}"
        console.print(line, markup=False, highlight=False, soft_wrap=True)
        for partition, at in view["behind"].items():
            line = f"  {partition}: committed {at['committed']}, last record ends at {at['end']}"
            console.print(line, markup=False, highlight=False, soft_wrap=True)
