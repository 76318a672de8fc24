"""``cdc status``: which worker leads a single-writer sink on Kafka, and which stand by.

The sink's lease group (:mod:`cdc.log.kafka.leadership`) says it: the member that owns partition
0 of ``<pipeline>.__leader`` leads (it opened the store and reads the log), every other member
is a standby. Sinks that every worker writes (Redis, PostgreSQL...) and the embedded log (one
process) have no lease: their report has no ``workers``.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.errors import CdcError
from cdc.log.base import Log


def workers_report(
    log: Log, pipeline: Pipeline, sink: str, sink_type: str, describe_group: Any
) -> dict[str, Any] | None:
    """The lease group's leader and standbys (``None``: the sink has no lease).

    Args:
        describe_group: :func:`cdc.cli.status.group_report`, the group as the log knows it.
    """
    if pipeline.log.type != "kafka" or not _single_writer(sink_type):
        return None
    from cdc.log.kafka.leadership import leader_topic, lease_group  # Kafka's client: here only

    group = describe_group(log, lease_group(pipeline.name, sink))
    lease = (leader_topic(pipeline.name), 0)
    leader, standbys = None, []
    for member in group.get("members") or []:
        worker = {k: member[k] for k in ("member_id", "client_id", "host")}
        if lease in member["assigned"]:
            leader = worker
        else:
            standbys.append(worker)
    return {
        "group": group["id"],
        "state": group["state"],
        "leader": leader,
        "standbys": standbys,
        **({"error": group["error"]} if "error" in group else {}),
    }


def _single_writer(sink_type: str) -> bool:
    try:
        return plugins.single_writer(sink_type)
    except CdcError:  # a plugin not installed here: status shows the rest
        return False


def print_workers(sink: dict[str, Any], console: Console) -> None:
    """One line under the sink's state: who leads it and who stands by."""
    workers = sink.get("workers")
    if workers is None:
        return
    leader = workers["leader"]
    line = "  single writer: leader " + ("none" if leader is None else _name(leader))
    standbys = workers["standbys"]
    line += f"; {len(standbys)} standby" + "".join(
        f"{';' if i else ':'} {_name(w)}" for i, w in enumerate(standbys)
    )
    if workers.get("error"):
        line += f" (lease group unknown: {workers['error']})"
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _name(worker: dict[str, Any]) -> str:
    return f"{worker['client_id']} at {worker['host']}"
