"""The pipeline's Prometheus metrics: their names, labels and help texts, in one place.

The names are a contract (DESIGN.md, "Metrics"; README, "Metrics"): dashboards and alerts use
them. Each process has its own :class:`~prometheus_client.CollectorRegistry`, so two pipelines
in one test process never share a series. Tasks update the metrics once per batch, never per
record (:mod:`cdc.metrics.observers`).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# No ``*_created`` series beside each counter and histogram: nothing here reads them, and they
# double the series a scrape returns.
disable_created_metrics()  # type: ignore[no-untyped-call]

#: The sink states ``cdc_sink_state`` reports, one series each (1 for the current one).
SINK_STATES: Final = ("running", "retrying", "stopped")
#: The slot's ``wal_status`` values (``pg_replication_slots``), one series each.
WAL_STATUSES: Final = ("reserved", "extended", "unreserved", "lost")
#: The snapshot chunk states ``cdc_snapshot_chunks`` reports.
CHUNK_STATES: Final = ("pending", "done")

# Append times: an embedded-log batch takes a few ms, a Kafka transaction tens of ms.
_APPEND_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Source commit to sink apply: from under 50 ms (caught up) to minutes (a backlog).
_LATENCY_BUCKETS: Final = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
)  # fmt: skip


class Metrics:
    """Every metric of the contract, registered in ``registry`` (a new one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        p = ("pipeline",)
        self.source_events = Counter(
            "cdc_source_events", "Changes read from the source.", [*p, "table", "op"], registry=r
        )
        self.source_lag = Gauge(
            "cdc_source_lag_seconds",
            "Commit time of the last appended change to now; 0 when idle and caught up.",
            p,
            registry=r,
        )
        self.source_position = Gauge(
            "cdc_source_position",
            "The source position last committed to the log, as a number (PostgreSQL: the LSN).",
            p,
            registry=r,
        )
        self.retained_wal = Gauge(
            "cdc_source_retained_wal_bytes",
            "WAL the server keeps for the slot: pg_current_wal_lsn() - restart_lsn.",
            p,
            registry=r,
        )
        self.slot_active = Gauge(
            "cdc_source_slot_active", "1 while a process streams from the slot.", p, registry=r
        )
        self.slot_wal_status = Gauge(
            "cdc_source_slot_wal_status",
            "The slot's wal_status: 1 for the current one (lost: the slot is unusable).",
            [*p, "status"],
            registry=r,
        )
        self.log_records = Counter(
            "cdc_log_records", "Records appended to the log.", [*p, "topic"], registry=r
        )
        self.log_append = Histogram(
            "cdc_log_append_seconds",
            "Time to append one batch to the log (records and offsets, until committed).",
            p,
            buckets=_APPEND_BUCKETS,
            registry=r,
        )
        self.sink_lag = Gauge(
            "cdc_sink_lag_records",
            "Records in the log not yet applied by the sink.",
            [*p, "sink", "topic", "partition"],
            registry=r,
        )
        self.sink_applied = Counter(
            "cdc_sink_applied",
            "Records the sink applied.",
            [*p, "sink", "table", "op"],
            registry=r,
        )
        self.sink_errors = Counter(
            "cdc_sink_errors",
            "Failed sink writes, by kind: unavailable (retried), record (a bad record), fatal.",
            [*p, "sink", "kind"],
            registry=r,
        )
        self.sink_state = Gauge(
            "cdc_sink_state",
            "The sink's state: 1 for the current one of running, retrying, stopped.",
            [*p, "sink", "state"],
            registry=r,
        )
        self.snapshot_rows = Counter(
            "cdc_snapshot_rows", "Snapshot rows appended to the log.", [*p, "table"], registry=r
        )
        self.snapshot_chunks = Gauge(
            "cdc_snapshot_chunks",
            "Snapshot chunks by state.",
            [*p, "table", "state"],
            registry=r,
        )
        self.dead_letters = Counter(
            "cdc_dead_letters",
            "Records routed to the dead-letter topic, by reason.",
            [*p, "reason"],
            registry=r,
        )
        self.last_progress = Gauge(
            "cdc_last_progress_timestamp_seconds",
            "When the task last made progress (source: a commit to the log; sink: an applied"
            " batch), as a Unix time.",
            [*p, "task"],
            registry=r,
        )
        self.task_stalled = Gauge(
            "cdc_task_stalled",
            "1 while the task makes no progress although work is waiting for it.",
            [*p, "task"],
            registry=r,
        )
        self.end_to_end = Histogram(
            "cdc_end_to_end_latency_seconds",
            "Source commit to sink apply, one sample per applied batch (its newest record).",
            [*p, "sink"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
