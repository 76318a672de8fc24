"""The metrics sampler's snapshot gauges read the stored progress through its codec's typed view
(a real embedded log holding progress as a source stores it: a running table, a finished one, a
queued request, which has no chunks yet)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from cdc.contracts import snapshot_offsets as so
from cdc.log.embedded import EmbeddedLog
from cdc.metrics.health import Health
from cdc.metrics.registry import Metrics
from cdc.metrics.sampler import Sampler
from cdc.support.logging import get_logger


def test_the_snapshot_gauges_count_each_tables_chunks(tmp_path: Path) -> None:
    log = EmbeddedLog(tmp_path / "log")
    try:
        tx = log.begin()
        tx.store_offsets(
            {
                so.RUN_KEY: {"id": "s1", "finished": []},
                so.table_key("public.a"): {"chunks_total": 5, "done": [[0, 1], [3, 3]]},
                so.table_key("public.b"): {"chunks_total": 2, "done": [[0, 1]]},
                so.REQUEST_PREFIX + "r1": {"id": "r1", "table": "public.c", "seq": 1},
            }
        )
        tx.commit()
        registry = CollectorRegistry()
        metrics = Metrics(registry)
        health = Health(metrics, "p", 60.0, get_logger())
        Sampler(metrics, health, "p", log, None, {}, 1.0, get_logger()).sample()
    finally:
        log.close()
    found = {
        (s.labels["table"], s.labels["state"]): s.value
        for family in registry.collect()
        if family.name == "cdc_snapshot_chunks"
        for s in family.samples
    }
    assert found == {
        ("public.a", "done"): 3,
        ("public.a", "pending"): 2,
        ("public.b", "done"): 2,
        ("public.b", "pending"): 0,
    }
