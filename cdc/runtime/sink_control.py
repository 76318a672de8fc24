"""The sinks' control topic, ``<pipeline>.__sinks``: each sink's state, and table resets.

It lives in the log, so ``cdc status``, ``cdc verify`` and ``cdc sink --reset-table`` see the
same thing from any process or host that reaches the log. A compacted topic, keyed by JSON:

- ``{"sink": NAME, "kind": "state"}``: ``{"state", "reason", "error_type", "since_ms"}``,
  written by the sink's task when it starts (``running``), when its store is away and it
  retries (``retrying``, with the error; ``running`` again once a batch lands) and when an
  error stops it (``stopped``, with the error). The log cannot tell whether a process is
  alive: ``running`` means the sink started and no error has stopped it since; the processes'
  own beats (:mod:`cdc.runtime.heartbeat`, same topic) say whether one still runs it.
- ``{"sink": NAME, "kind": "reset", "id": ID}``: ``{"table", "state", "reason",
  "requested_ms", "updated_ms"}``, a table reset: ``requested`` by ``cdc sink FILE NAME
  --reset-table T``, then ``applied`` by the sink's task (the sink dropped the table and reads
  its topic again from the start), ``done`` once it has read up to the log's end as of the
  reset, or ``failed`` with the reason. One key per request, so a new request never
  overwrites an older one's outcome.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from cdc.log.base import Log, Record
from cdc.log.offsets import end_offsets
from cdc.support.clock import now_ms
from cdc.support.redact import redact

PENDING = "requested"
APPLIED = "applied"
DONE = "done"
FAILED = "failed"
RUNNING = "running"
RETRYING = "retrying"  # the sink's store is away; its task retries the batch with backoff
STOPPED = "stopped"


def control_topic(pipeline: str) -> str:
    return f"{pipeline}.__sinks"


@dataclass(frozen=True, slots=True)
class Reset:
    """A table reset of one sink, as last recorded."""

    id: str
    sink: str
    table: str
    state: str
    requested_ms: int
    reason: str | None = None
    targets: dict[int, int] | None = None  # applied: the topic's end offsets at the reset

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "table": self.table,
            "state": self.state,
            "reason": self.reason,
            "requested_ms": self.requested_ms,
            "targets": None
            if self.targets is None
            else {str(p): o for p, o in self.targets.items()},
        }


def sink_state_report(control: SinkControl, sink: str) -> dict[str, Any]:
    """What ``cdc status`` shows of a sink's state: ``state`` (``running``, ``stopped`` or
    ``unknown``: nothing recorded yet), ``reason`` and ``since_ms``, and its table resets that
    are not done (requested, applied, failed) plus the last one done."""
    state = control.state(sink) or {}
    resets = control.resets(sink)
    done = [r for r in resets if r.state == DONE][-1:]
    shown = [r for r in resets if r.state != DONE] + done
    return {
        "state": state.get("state", "unknown"),
        "reason": state.get("reason"),
        "since_ms": state.get("since_ms"),
        "resets": [r.to_json() for r in sorted(shown, key=lambda r: r.requested_ms)],
    }


class SinkControl:
    """Reads and writes the control topic; reads follow it incrementally.

    Args:
        log: the pipeline's log.
        pipeline: the pipeline's name.
        create: create the topic now (writers); readers (``cdc status``) leave a log that has
            none as it is and see no state.
    """

    def __init__(self, log: Log, pipeline: str, create: bool = False) -> None:
        self._log = log
        self.topic = control_topic(pipeline)
        self._next: dict[int, int] = {}
        self._latest: dict[bytes, dict[str, Any]] = {}
        self._exists = create
        if create:
            log.ensure_topics([self.topic])

    # -- writing -------------------------------------------------------------------------------

    def set_state(
        self,
        sink: str,
        state: str,
        error: BaseException | None = None,
        since_ms: int | None = None,
    ) -> None:
        """Record ``sink``'s state (``running``, or ``stopped`` with the error that stopped it)
        since ``since_ms`` (default: now)."""
        value: dict[str, Any] = {"state": state, "since_ms": since_ms or now_ms(), "reason": None}
        if error is not None:
            # Stored state: a driver's message that escaped translation may quote a DSN.
            value.update(reason=redact(str(error)), error_type=type(error).__name__)
        self._append({"sink": sink, "kind": "state"}, value)

    def request_reset(self, sink: str, table: str) -> Reset:
        """Ask ``sink`` to reset ``table`` (``schema.table``); returns the request."""
        request = Reset(uuid.uuid4().hex[:12], sink, table, PENDING, now_ms())
        self._write_reset(request)
        return request

    def update_reset(
        self,
        request: Reset,
        state: str,
        reason: str | None = None,
        targets: dict[int, int] | None = None,
    ) -> Reset:
        """Record a new state of ``request``; returns the request as recorded."""
        updated = Reset(
            request.id,
            request.sink,
            request.table,
            state,
            request.requested_ms,
            reason,
            targets if targets is not None else request.targets,
        )
        self._write_reset(updated)
        return updated

    def _write_reset(self, request: Reset) -> None:
        key = {"sink": request.sink, "kind": "reset", "id": request.id}
        self._append(key, {**request.to_json(), "updated_ms": now_ms()})

    def _append(self, key: dict[str, Any], value: dict[str, Any]) -> None:
        if not self._exists:
            self._log.ensure_topics([self.topic])
            self._exists = True
        encoded = orjson.dumps(key, option=orjson.OPT_SORT_KEYS)
        tx = self._log.begin()
        try:
            tx.append([Record(self.topic, encoded, orjson.dumps(value))])
            tx.commit()
        except BaseException:
            tx.abort()
            raise

    # -- reading -------------------------------------------------------------------------------

    def state(self, sink: str, refresh: bool = True) -> dict[str, Any] | None:
        """``sink``'s last recorded state, or ``None``."""
        if refresh:
            self.refresh()
        return self._value({"sink": sink, "kind": "state"})

    def sinks(self) -> set[str]:
        """The sinks anything was recorded for, as of the last refresh."""
        return {str(orjson.loads(key).get("sink")) for key in self._latest}

    def resets(self, sink: str, refresh: bool = True) -> list[Reset]:
        """Every reset of ``sink`` ever requested, oldest first."""
        if refresh:
            self.refresh()
        found = []
        for key, value in self._latest.items():
            parsed = orjson.loads(key)
            if parsed.get("kind") == "reset" and parsed.get("sink") == sink:
                found.append(_reset(sink, parsed["id"], value))
        return sorted(found, key=lambda r: (r.requested_ms, r.id))

    def pending(self, sink: str) -> list[Reset]:
        """The resets of ``sink`` not applied yet, oldest first."""
        return [r for r in self.resets(sink) if r.state == PENDING]

    def rebuilding(self, sink: str) -> list[Reset]:
        """The resets of ``sink`` applied but not read up to their targets yet."""
        return [r for r in self.resets(sink) if r.state == APPLIED and r.targets is not None]

    def find(self, sink: str, request_id: str) -> Reset | None:
        return next((r for r in self.resets(sink) if r.id == request_id), None)

    def refresh(self) -> bool:
        """Read what was appended since the last call; True if anything was."""
        changed = False  # and stays so while no sink ever recorded anything (no topic yet)
        for partition, end in end_offsets(self._log, self.topic).items():
            offset = self._next.get(partition, 0)
            while offset < end:
                records = self._log.read(self.topic, partition, offset, 1000)
                if not records:
                    break
                for record in records:
                    if record.key is not None and record.value is not None:
                        self._latest[record.key] = orjson.loads(record.value)
                        changed = True
                offset = records[-1].offset + 1
            self._next[partition] = offset
        return changed

    def _value(self, key: dict[str, Any]) -> dict[str, Any] | None:
        return self._latest.get(orjson.dumps(key, option=orjson.OPT_SORT_KEYS))


def _reset(sink: str, request_id: str, value: dict[str, Any]) -> Reset:
    targets = value.get("targets")
    return Reset(
        request_id,
        sink,
        str(value.get("table")),
        str(value.get("state")),
        int(value.get("requested_ms") or 0),
        value.get("reason"),
        None if targets is None else {int(p): int(o) for p, o in targets.items()},
    )
