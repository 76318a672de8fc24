"""A view's metrics and its ``cdc status`` entry, on a real embedded log (SQLite, in process):
the records it read and the documents it wrote, its position, and its lag (its group's offsets
against its tables' last records) before it ran, once it caught up, and with records waiting."""

from __future__ import annotations

import io
import threading
from pathlib import Path

from rich.console import Console

from cdc.cli.status_views import print_views, views_report
from cdc.config.pipeline import parse
from cdc.log.embedded.log import EmbeddedLog
from cdc.metrics.registry import Metrics
from cdc.metrics.views import ViewLagSampler, ViewObserver
from cdc.support.logging import get_logger
from cdc.support.wait import wait_until
from cdc.views.progress import input_topics, records_behind, stored_documents
from cdc.views.task import ViewTask
from tests.unit.test_views_task import FILE, change, documents, log  # noqa: F401 (fixture)

LABELS = {"pipeline": "shop", "view": "order_docs"}
GROUP = "shop.view.order_docs"


def _value(metrics: Metrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, LABELS)


def test_records_behind_sums_what_each_partition_has_left() -> None:
    left = {"t[0]": {"committed": 3, "end": 10}, "t[1]": {"committed": 0, "end": 2}}
    assert records_behind(left) == 9
    assert records_behind({}) == 0


def test_no_local_store_counts_no_documents(tmp_path: Path) -> None:
    assert stored_documents(tmp_path / "views" / "order_docs.sqlite") is None


def test_the_views_metrics_and_status_follow_what_it_read_and_wrote(
    log: EmbeddedLog,  # noqa: F811 (the fixture)
) -> None:
    pipeline = parse(FILE + f"log: {{type: embedded, path: '{log.path}'}}\n", {})
    view = pipeline.views[0]
    with log.begin() as tx:
        tx.append([change("customers", {"id": 1, "name": "A"}, 10)])
        tx.append([change("orders", {"id": n, "customer_id": 1}, 10 + n) for n in (1, 2)])
    metrics = Metrics()
    sampler = ViewLagSampler(
        metrics, "shop", log, {"order_docs": (GROUP, input_topics(pipeline, view))}, 1.0,
        get_logger(),
    )  # fmt: skip
    sampler.sample()
    assert _value(metrics, "cdc_view_lag_records") == 3  # nothing read yet
    assert _value(metrics, "cdc_view_documents_total") is None  # no observer yet
    (before,) = views_report(log, pipeline)
    assert (before["lag"], before["documents"], before["position"]) == (3, None, None)

    stop = threading.Event()
    task = ViewTask(
        pipeline, view, 0, log, stop, get_logger(), poll_timeout_s=0.05,
        store_dir=log.path / "views", observer=ViewObserver(metrics, "shop", "order_docs"),
    )  # fmt: skip
    assert _value(metrics, "cdc_view_documents_total") == 0  # exported from the start
    thread = threading.Thread(target=task.serve, daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: len(documents(log)) == 2 and not views_report(log, pipeline)[0]["lag"], 10
        )
    finally:
        stop.set()
        thread.join(10)
    sampler.sample()
    assert _value(metrics, "cdc_view_lag_records") == 0
    assert _value(metrics, "cdc_view_records_total") == 3
    # One document a touched order a batch: 2, or more when the customer came in a later batch.
    assert _value(metrics, "cdc_view_documents_total") == task.documents_written >= 2
    assert _value(metrics, "cdc_view_position") == 12

    with log.begin() as tx:  # read by no task: the view is behind by it
        tx.append([change("order_items", {"id": 9, "order_id": 2}, 20)])
    sampler.sample()
    assert _value(metrics, "cdc_view_lag_records") == 1
    (after,) = views_report(log, pipeline)
    assert after["documents"] == 2 and after["position"] == 12 and after["lag"] == 1
    assert after["topic"] == "shop.views.order_docs" and after["table"] == "views.order_docs"
    assert after["behind"] == {"shop.public.order_items[0]": {"committed": 0, "end": 1}}
    # No process beats for the pipeline (the task ran in this test): the view is not running.
    assert (after["state"], after["reason"]) == (
        "not running",
        "no running process runs the source",
    )
    out = io.StringIO()
    print_views([after], Console(file=out, width=200))
    assert out.getvalue().splitlines() == [
        "view order_docs -> shop.views.order_docs: not running (no running process runs the "
        "source); 2 documents, 1 record behind its tables; read up to source position 12",
        "  shop.public.order_items[0]: committed 0, last record ends at 1",
    ]
