"""The pipeline's Prometheus metrics: their names, labels and help texts, in one place.

The names are a contract (DESIGN.md, "Metrics"; README, "Metrics"): dashboards and alerts use
them. Each process has its own :class:`~prometheus_client.CollectorRegistry`, so two pipelines
in one test process never share a series. Tasks update the metrics once per batch, never per
record (:mod:`cdc.metrics.observers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# No ``*_created`` series beside each counter and histogram: nothing here reads them, and they
# double the series a scrape returns.
disable_created_metrics()  # type: ignore[no-untyped-call]

#: The sink states ``cdc_sink_state`` reports, one series each (1 for the current one).
#: A worker of a single-writer sink while another one leads it (:mod:`cdc.runtime.standby`).
STANDBY: Final = "standby"
SINK_STATES: Final = ("running", "retrying", "stopped", STANDBY)
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


@dataclass(frozen=True)
class Spec:
    """One metric of the contract: its kind, name (without ``_total``), labels after
    ``pipeline``, help text, and histogram buckets."""

    kind: type[Counter] | type[Gauge] | type[Histogram]
    name: str
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()


#: Every metric, by the :class:`Metrics` attribute that holds it.
SPECS: Final = {
    "source_events": Spec(Counter, "cdc_source_events", ("table", "op"), "Changes read from the source."),
    "source_lag": Spec(Gauge, "cdc_source_lag_seconds", (), "Commit time of the last appended change to now; 0 when idle and caught up."),
    "source_position": Spec(Gauge, "cdc_source_position", (), "The source position last committed to the log, as a number (PostgreSQL: the LSN)."),
    "retained_wal": Spec(Gauge, "cdc_source_retained_wal_bytes", (), "WAL the server keeps for the slot: pg_current_wal_lsn() - restart_lsn."),
    "slot_active": Spec(Gauge, "cdc_source_slot_active", (), "1 while a process streams from the slot."),
    "slot_wal_status": Spec(Gauge, "cdc_source_slot_wal_status", ("status",), "The slot's wal_status: 1 for the current one (lost: the slot is unusable)."),
    "log_records": Spec(Counter, "cdc_log_records", ("topic",), "Records appended to the log."),
    "log_append": Spec(Histogram, "cdc_log_append_seconds", (), "Time to append one batch to the log (records and offsets, until committed).", _APPEND_BUCKETS),
    "sink_lag": Spec(Gauge, "cdc_sink_lag_records", ("sink", "topic", "partition"), "Records in the log not yet applied by the sink."),
    "sink_applied": Spec(Counter, "cdc_sink_applied", ("sink", "table", "op"), "Records the sink applied."),
    "sink_errors": Spec(Counter, "cdc_sink_errors", ("sink", "kind"), "Failed sink writes, by kind: unavailable (retried), record (a bad record), fatal."),
    "sink_state": Spec(Gauge, "cdc_sink_state", ("sink", "state"), "The sink's state: 1 for the current one of running, retrying, stopped, standby (another worker leads a single-writer sink)."),
    "snapshot_rows": Spec(Counter, "cdc_snapshot_rows", ("table",), "Snapshot rows appended to the log."),
    "snapshot_chunks": Spec(Gauge, "cdc_snapshot_chunks", ("table", "state"), "Snapshot chunks by state."),
    "dead_letters": Spec(Counter, "cdc_dead_letters", ("reason",), "Records routed to the dead-letter topic, by reason."),
    "last_progress": Spec(Gauge, "cdc_last_progress_timestamp_seconds", ("task",), "When the task last made progress (source: a change appended; sink: an applied batch), as a Unix time."),
    "task_stalled": Spec(Gauge, "cdc_task_stalled", ("task",), "1 while the task makes no progress although work is waiting for it."),
    "end_to_end": Spec(Histogram, "cdc_end_to_end_latency_seconds", ("sink",), "Source commit to sink apply, one sample per applied batch (its newest record).", _LATENCY_BUCKETS),
    "sink_rebuilds": Spec(Counter, "cdc_sink_rebuilds", ("sink",), "Rebuilds of the sink's store from the log after the store lost its data (a cache restarted empty)."),
    "sink_consistent": Spec(Gauge, "cdc_sink_consistent_position", ("sink",), "The source position the sink has applied every change up to, as a number (PostgreSQL: the LSN); what cdc wait waits for."),
    "verify_mismatched": Spec(Gauge, "cdc_verify_mismatched_keys", ("sink", "table"), "Keys the continuous verification (verify:) last found differing between the source and the sink, over the key ranges it checked; a lagging sink is not compared."),
    "verify_full_pass": Spec(Gauge, "cdc_verify_last_full_pass_timestamp_seconds", ("sink",), "When the continuous verification last finished a pass over every key range of the sink's tables, as a Unix time."),
    "view_records": Spec(Counter, "cdc_view_records", ("view",), "Records of the view's tables the view read and committed (its group's offsets moved past them), replays and changes that changed nothing included."),
    "view_documents": Spec(Counter, "cdc_view_documents", ("view",), "Documents the view wrote to its topic (a deleted root row's delete counts as one)."),
    "view_lag": Spec(Gauge, "cdc_view_lag_records", ("view",), "Records of the view's tables in the log that the view has not read yet, sampled every second (Kafka: every 5 s)."),
    "view_position": Spec(Gauge, "cdc_view_position", ("view",), "The highest source position the view has read, as a number (PostgreSQL: the LSN)."),
}  # fmt: skip


class Metrics:
    """Every metric of the contract (:data:`SPECS`), registered in ``registry`` (a new one by
    default), each an attribute named as in :data:`SPECS`."""

    source_events: Counter
    source_lag: Gauge
    source_position: Gauge
    retained_wal: Gauge
    slot_active: Gauge
    slot_wal_status: Gauge
    log_records: Counter
    log_append: Histogram
    sink_lag: Gauge
    sink_applied: Counter
    sink_errors: Counter
    sink_state: Gauge
    snapshot_rows: Counter
    snapshot_chunks: Gauge
    dead_letters: Counter
    last_progress: Gauge
    task_stalled: Gauge
    end_to_end: Histogram
    sink_rebuilds: Counter
    sink_consistent: Gauge
    verify_mismatched: Gauge
    verify_full_pass: Gauge
    view_records: Counter
    view_documents: Counter
    view_lag: Gauge
    view_position: Gauge

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        for attribute, spec in SPECS.items():
            labels = ("pipeline", *spec.labels)
            more: dict[str, Any] = {"buckets": spec.buckets} if spec.buckets else {}
            metric = spec.kind(spec.name, spec.help, labels, registry=self.registry, **more)
            setattr(self, attribute, metric)
