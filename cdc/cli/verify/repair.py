"""``cdc verify --repair``: re-read the keys a comparison found differing, through the online
snapshot's watermarks, then verify again.

Each source table's differing keys (missing in a sink, extra in it, or different; the union
over the sinks) go to the source as repair requests (:data:`BATCH_KEYS` keys each): snapshot
requests that read only those keys between a low and a high watermark while the pipeline
streams, and delete in the same window every key the table no longer has. So a repair writes
each key's current row (or its delete) into the log once, ordered like any snapshot row after
every change before the window, and a change the stream shows while the window is open wins
over it (a concurrent insert of a key the sink held extra is not deleted). Every sink of the
table gets the repair through the log, as it gets every change: a sink that already held the
row skips or rewrites it to the same value.

The running pipeline carries out the requests (``cdc run``; a stopped one does when it starts):
the command waits for each to end, then for the sinks to consume the log, then compares again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdc.contracts import plugins
from cdc.contracts.errors import CdcError, ConfigError
from cdc.log.base import Log
from cdc.verify.comparison import TableComparison

#: Keys per repair request: each request's ``where`` lists them (and the stored offsets keep
#: them until the request is done).
BATCH_KEYS = 1000
#: At most this many bytes of keys (canonical JSON) a request: the stored offsets keep them
#: with every commit while it runs (MongoDB's as ``_id`` texts, about 2-3 times as long), and
#: one offsets record must stay well inside a Kafka message (1 MB by default).
BATCH_BYTES = 128 * 1024


@dataclass
class Repair:
    """What one source table's repair did, and for which sinks."""

    table: str
    keys: int = 0
    requests: list[str] = field(default_factory=list)
    #: Per sink: how many of its keys were missing, extra and different.
    sinks: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Per sink: the keys repaired (canonical JSON objects, all of them).
    sink_keys: dict[str, list[Any]] = field(default_factory=dict)
    outcome: str = "pending"  # done, failed, cancelled, timed out, or why it was not tried
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "keys": self.keys,
            "requests": self.requests,
            "sinks": {
                sink: {**counts, "keys": self.sink_keys.get(sink, [])}
                for sink, counts in self.sinks.items()
            },
            "outcome": self.outcome,
            "error": self.error,
        }


def plan_repairs(pipeline: Any, results: Sequence[TableComparison]) -> dict[str, Repair]:
    """The repair of each table some sink differs in, with each sink's keys."""
    repairs: dict[str, Repair] = {}
    wanted: dict[str, set[bytes]] = {}
    for result in results:
        if result.state != "different":
            continue
        missing, extra, different = result.keys
        repair = repairs.setdefault(result.table, Repair(result.table))
        repair.sinks[result.sink] = {
            "missing": len(missing),
            "extra": len(extra),
            "different": len(different),
        }
        keys = missing | extra | different
        repair.sink_keys[result.sink] = [orjson.loads(k) for k in sorted(keys)]
        wanted.setdefault(result.table, set()).update(keys)
    for table, repair in repairs.items():
        repair.keys = len(wanted[table])
        reason = _not_repairable(pipeline, table)
        if reason is not None:
            repair.outcome, repair.error = "not repaired", reason
    return repairs


def _not_repairable(pipeline: Any, table: str) -> str | None:
    """Why a table's keys cannot be re-read by key, if so."""
    if table in {view.table for view in getattr(pipeline, "views", ())}:
        return (
            f"{table} is a live join view: it is rebuilt from its tables, not repaired "
            "(docs/views.md, Operations)"
        )
    plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
    if getattr(plugin, "request_repair", None) is None:
        return (
            f"the {pipeline.source.type} source cannot re-read keys: re-snapshot the table "
            f"(`cdc snapshot FILE --table {table}`)"
        )
    if pipeline.chain() or pipeline.routed_from(table) != [table]:
        return "the pipeline's transforms make the sinks' keys other than the source's"
    return None


def request_repairs(
    pipeline: Any, repairs: dict[str, Repair], keys_of: Callable[[str], list[bytes]]
) -> None:
    """Write each repairable table's requests (``keys_of``: its differing keys, canonical
    JSON); a table whose request is refused is marked so, the others go on."""
    plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
    for table, repair in repairs.items():
        if repair.outcome != "pending":
            continue
        try:
            for batch in batches(keys_of(table)):
                request = plugin.request_repair(pipeline.source, pipeline.name, table, batch)
                repair.requests.append(request["id"])
        except ConfigError as exc:
            repair.outcome = "not repaired"
            repair.error = "; ".join(f"{where}: {message}" for where, message in exc.problems)
        except CdcError as exc:
            repair.outcome, repair.error = "failed", str(exc)


def batches(
    keys: Sequence[bytes], most_keys: int = BATCH_KEYS, most_bytes: int = BATCH_BYTES
) -> Iterator[list[Any]]:
    """``keys`` (canonical JSON) as the key objects of each request, in order: at most
    ``most_keys`` of them and ``most_bytes`` of their JSON a request (a longer key alone)."""
    batch: list[Any] = []
    size = 0
    for key in keys:
        if batch and (len(batch) >= most_keys or size + len(key) > most_bytes):
            yield batch
            batch, size = [], 0
        batch.append(orjson.loads(key))
        size += len(key)
    if batch:
        yield batch


def wait_for_repairs(
    log: Log, repairs: dict[str, Repair], timeout_s: float, echo: Callable[[str], None]
) -> None:
    """Wait until every request ended (the pipeline must run); each table's outcome is its
    requests' worst."""
    from cdc.metrics.snapshot_report import follow_request

    for repair in repairs.values():
        if repair.outcome != "pending":
            continue
        repair.outcome = "done"
        for request in repair.requests:
            outcome = follow_request(log.source_offsets, request, timeout_s, echo)
            if outcome != "done":
                repair.outcome = outcome or "timed out"
                if outcome is None:
                    repair.error = (
                        f"request {request} did not end within {timeout_s:g} s: is `cdc run` "
                        "running? (it carries out the request when it reads it)"
                    )
                break


def differing_keys(results: Sequence[TableComparison]) -> Callable[[str], list[bytes]]:
    """Each table's differing keys over every sink, in key order."""

    def keys_of(table: str) -> list[bytes]:
        found: set[bytes] = set()
        for result in results:
            if result.table == table and result.state == "different":
                for keys in result.keys:
                    found.update(keys)
        return sorted(found)

    return keys_of
