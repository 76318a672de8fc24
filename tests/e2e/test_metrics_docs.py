"""The shipped Grafana dashboard and Prometheus alert rules, checked with the real Prometheus.

- ``promtool check rules`` accepts docs/prometheus/alerts.yml, and ``promtool test rules`` runs
  docs/prometheus/alerts_test.yml: each alert fires for a sick pipeline after its ``for:``, and
  not for a healthy one.
- Every metric name the dashboard, the rules and the rules' unit tests use is one
  cdc/metrics/registry.py exposes (``_total`` for counters, ``_bucket``/``_sum``/``_count`` for
  histograms), with that metric's labels; every metric of the registry has a panel.
- A real Prometheus scrapes a registry filled as a running pipeline fills it: every dashboard
  query (``$pipeline`` and Grafana's ``$__rate_interval`` replaced) returns data, the
  ``pipeline`` variable's ``label_values`` query finds the pipeline, and every alert expression
  is accepted.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml
from prometheus_client import start_http_server
from prometheus_client.metrics import MetricWrapperBase

from cdc.metrics.registry import CHUNK_STATES, SINK_STATES, WAL_STATUSES, Metrics
from cdc.testing import wait_until
from tests.services.common import ServiceUnavailableError, in_ci
from tests.services.ports import LOOPBACK, free_port
from tests.services.prometheus import LocalPrometheus

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "cdc-pipeline.json"
ALERTS = ROOT / "docs" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "docs" / "prometheus" / "alerts_test.yml"
#: The alerts the issue asks for (lag, retained WAL, the slot, stalls, a stopped sink, errors).
REQUIRED_ALERTS = {
    "CdcSourceLagHigh",
    "CdcRetainedWalHigh",
    "CdcSlotInactive",
    "CdcSlotWalLost",
    "CdcTaskStalled",
    "CdcSinkStopped",
    "CdcSinkErrors",
    "CdcNoProgress",
    "CdcDeadLetters",
}
#: Grafana's variables: the dashboard's own, and the built-in rate window.
PIPELINE = "shop"
RATE_INTERVAL = "10s"
_METRIC = re.compile(r"\bcdc_[a-z0-9_]+\b")
_BY = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_]\w*)\s*(?:=~|!=|!~|=)\s*"([^"]*)"')
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")


def _unavailable(what: str) -> NoReturn:
    if in_ci():
        pytest.fail(f"service missing in CI: {what}", pytrace=False)
    pytest.skip(what)


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        _unavailable("promtool not found (apt-get install prometheus; `make apt`)")
    return found


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _panels() for t in p["targets"]]


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _exposed() -> dict[str, set[str]]:
    """Each sample name the registry exposes, with its labels."""
    exposed: dict[str, set[str]] = {}
    for metric in vars(Metrics()).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        name, labels = metric._name, set(metric._labelnames)
        kind = metric._type
        if kind == "counter":
            exposed[f"{name}_total"] = labels
        elif kind == "histogram":
            exposed.update({f"{name}_sum": labels, f"{name}_count": labels})
            exposed[f"{name}_bucket"] = labels | {"le"}
        else:
            exposed[name] = labels
    return exposed


def _check_names(expr: str, exposed: dict[str, set[str]]) -> None:
    """The metric names of ``expr`` exist, and its groupings and matchers use their labels."""
    names = set(_METRIC.findall(expr))
    assert names, f"no cdc_ metric in {expr!r}"
    unknown = names - exposed.keys()
    assert not unknown, f"{expr!r}: not in cdc/metrics/registry.py: {sorted(unknown)}"
    labels = set().union(*(exposed[n] for n in names))
    used = {label.strip() for group in _BY.findall(expr) for label in group.split(",")}
    used |= {m[0] for block in _MATCHERS.findall(expr) for m in _MATCHER.findall(block)}
    assert used - {""} <= labels, f"{expr!r}: labels {sorted(used - labels)} not on {names}"


def _check_values(expr: str) -> None:
    """A state or status the expression matches is one the metrics report."""
    allowed = {"state": {*SINK_STATES, *CHUNK_STATES}, "status": set(WAL_STATUSES)}
    for block in _MATCHERS.findall(expr):
        for label, value in _MATCHER.findall(block):
            if label in allowed and "$" not in value:
                assert value in allowed[label], f"{expr!r}: {label}={value!r} is never reported"


def test_alert_rules_pass_promtool_check() -> None:
    checked = subprocess.run(
        [_promtool(), "check", "rules", str(ALERTS)], capture_output=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(_rules())} rules found".encode() in checked.stdout, checked.stdout


def test_alert_rules_fire_in_promtool_unit_tests() -> None:
    tested = subprocess.run(
        [_promtool(), "test", "rules", str(ALERTS_TEST)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert b"SUCCESS" in tested.stdout, tested.stdout


def test_every_alert_is_unit_tested_firing_and_quiet() -> None:
    alerts = {rule["alert"] for rule in _rules()}
    assert alerts >= REQUIRED_ALERTS, sorted(REQUIRED_ALERTS - alerts)
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    assert firing == alerts, f"never seen firing: {sorted(alerts - firing)}"
    assert quiet == alerts, f"never seen quiet: {sorted(alerts - quiet)}"
    for rule in _rules():
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule
        assert {"summary", "description"} <= rule["annotations"].keys(), rule


def test_rules_and_their_tests_use_the_registrys_names_and_labels() -> None:
    exposed = _exposed()
    for rule in _rules():
        _check_names(rule["expr"], exposed)
        _check_values(rule["expr"])
    for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]:
        for series in test["input_series"]:
            name, _, rest = series["series"].partition("{")
            labels = {label for label, _ in _MATCHER.findall(rest)}
            assert name in exposed, f"{series['series']}: no such metric"
            assert labels == exposed[name], f"{series['series']}: labels are {exposed[name]}"
            _check_values(series["series"])


def test_dashboard_uses_the_registrys_names_and_covers_every_metric() -> None:
    exposed = _exposed()
    exprs = _dashboard_exprs()
    for expr in exprs:
        _check_names(expr, exposed)
        _check_values(expr)
        assert set(_VARIABLE.findall(expr)) <= {"pipeline", "__rate_interval"}, expr
    used = {name for expr in exprs for name in _METRIC.findall(expr)}
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in used}
    registered = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in exposed}
    assert registered <= families, f"no panel for {sorted(registered - families)}"


def test_dashboard_is_well_formed() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    pipeline = variables["pipeline"]
    assert pipeline["query"]["query"] == "label_values(cdc_source_lag_seconds, pipeline)"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), ids
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        covered = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
    for panel in _panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        refs = [t["refId"] for t in panel["targets"]]
        assert panel["targets"] and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]


def _fill(metrics: Metrics) -> None:
    """Sets every metric as a running pipeline with two sinks, a view and a snapshot would."""
    p = {"pipeline": PIPELINE}
    for table in ("public.orders", "public.items"):
        for op in ("c", "u", "d", "r"):
            metrics.source_events.labels(**p, table=table, op=op).inc(10)
            for sink in ("cache", "warehouse"):
                metrics.sink_applied.labels(**p, sink=sink, table=table, op=op).inc(10)
        metrics.snapshot_rows.labels(**p, table=table).inc(100)
        metrics.snapshot_chunks.labels(**p, table=table, state="done").set(3)
        metrics.snapshot_chunks.labels(**p, table=table, state="pending").set(1)
        metrics.log_records.labels(**p, topic=f"{PIPELINE}.{table}").inc(40)
    metrics.source_lag.labels(**p).set(1.5)
    metrics.source_position.labels(**p).set(0x16B3748)
    metrics.retained_wal.labels(**p).set(64 * 1024 * 1024)
    metrics.slot_active.labels(**p).set(1)
    for status in WAL_STATUSES:
        metrics.slot_wal_status.labels(**p, status=status).set(status == "reserved")
    metrics.log_append.labels(**p).observe(0.004)
    for sink in ("cache", "warehouse"):
        metrics.sink_lag.labels(**p, sink=sink, topic=f"{PIPELINE}.public.orders", partition="0")
        for state in SINK_STATES:
            metrics.sink_state.labels(**p, sink=sink, state=state).set(state == "running")
        metrics.end_to_end.labels(**p, sink=sink).observe(0.2)
        metrics.sink_errors.labels(**p, sink=sink, kind="unavailable").inc()
        metrics.sink_rebuilds.labels(**p, sink=sink).inc()
        metrics.sink_consistent.labels(**p, sink=sink).set(0x16B3000)
        metrics.verify_mismatched.labels(**p, sink=sink, table="public.orders").set(0)
        metrics.verify_full_pass.labels(**p, sink=sink).set(time.time())
    for task in ("source", "sink:cache", "sink:warehouse"):
        metrics.last_progress.labels(**p, task=task).set(time.time())
        metrics.task_stalled.labels(**p, task=task).set(0)
    metrics.dead_letters.labels(**p, reason="too_large").inc()
    view = {**p, "view": "order_docs"}
    metrics.view_records.labels(**view).inc(50)
    metrics.view_documents.labels(**view).inc(20)
    metrics.view_lag.labels(**view).set(0)
    metrics.view_position.labels(**view).set(0x16B3000)


def _grow(metrics: Metrics) -> None:
    """Another batch: the counters move, so rates are above 0 (as under load)."""
    p = {"pipeline": PIPELINE}
    metrics.source_events.labels(**p, table="public.orders", op="c").inc(5)
    metrics.source_position.labels(**p).inc(4096)
    metrics.log_append.labels(**p).observe(0.02)
    metrics.end_to_end.labels(**p, sink="cache").observe(0.5)


@pytest.fixture(scope="module")
def scraped() -> Iterator[tuple[LocalPrometheus, Metrics]]:
    """A real Prometheus scraping a filled registry every 0.5 s."""
    metrics = Metrics()
    _fill(metrics)
    port = free_port()
    server, thread = start_http_server(port, addr=LOOPBACK, registry=metrics.registry)
    try:
        try:
            prometheus = LocalPrometheus([f"{LOOPBACK}:{port}"], scrape_interval_s=0.5)
        except ServiceUnavailableError as exc:
            _unavailable(str(exc))
        with prometheus:
            yield prometheus, metrics
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _substitute(expr: str) -> str:
    return expr.replace("$__rate_interval", RATE_INTERVAL).replace("$pipeline", PIPELINE)


def _query(prometheus: LocalPrometheus, promql: str) -> dict[str, Any]:
    url = f"{prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 400: a parse or type error, with its reason
        body = json.loads(exc.read())
    return body


def test_every_dashboard_query_returns_data_from_a_real_prometheus(
    scraped: tuple[LocalPrometheus, Metrics],
) -> None:
    prometheus, metrics = scraped
    pending = {_substitute(expr) for expr in _dashboard_exprs()}

    def answered() -> bool:
        _grow(metrics)
        for expr in sorted(pending):
            body = _query(prometheus, expr)
            assert body["status"] == "success", (expr, body)
            if body["data"]["result"]:
                pending.discard(expr)
        return not pending

    wait_until(answered, 30, 0.5, describe=lambda: f"data for {sorted(pending)}")


def test_the_pipeline_variable_finds_the_pipeline(
    scraped: tuple[LocalPrometheus, Metrics],
) -> None:
    prometheus, _ = scraped
    url = f"{prometheus.url}/api/v1/label/pipeline/values?" + urllib.parse.urlencode(
        {"match[]": "cdc_source_lag_seconds"}
    )

    def values() -> dict[str, Any] | None:
        with urllib.request.urlopen(url, timeout=10) as response:
            body: dict[str, Any] = json.loads(response.read())
        return body if body["data"] else None

    body = wait_until(values, 30, 0.5, describe="the pipeline label's values")
    assert body == {"status": "success", "data": [PIPELINE]}, body


def test_every_alert_expression_is_accepted_by_a_real_prometheus(
    scraped: tuple[LocalPrometheus, Metrics],
) -> None:
    prometheus, _ = scraped
    for rule in _rules():
        body = _query(prometheus, rule["expr"])
        assert body["status"] == "success", (rule["alert"], body)
    # A broken expression is refused: the check above can fail.
    assert _query(prometheus, "max by (pipeline (cdc_task_stalled)")["status"] == "error"
