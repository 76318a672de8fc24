"""A live join view's lease on Kafka (:mod:`cdc.views.standby`): of two gates of one view, one
runs the view's term and the other stands by, told who leads; when the leader lets go, the
standby runs. A standby view is ready and never stalled; ``cdc status`` names the standbys
beside the state of the process that runs the view. A closed lease leaves no admin client."""

from __future__ import annotations

import io
import threading
import time
import uuid
from typing import Any

import pytest
import structlog
from rich.console import Console

from cdc.cli.status_views import _task_state, print_views
from cdc.config.models import KafkaLogConfig
from cdc.contracts.errors import LogError, LogFatal
from cdc.log.kafka.leadership import KafkaLease, view_lease_group
from cdc.metrics import Health, Metrics
from cdc.runtime.heartbeat import RUNNING
from cdc.views.health import ViewHealth
from cdc.views.standby import TermFenced, ViewGate
from tests.e2e.cli_helpers import wait_for


class Member:
    """One process's gate of the view, serving in a thread; ``runs`` counts its terms."""

    def __init__(self, config: KafkaLogConfig, pipeline: str) -> None:
        self.stop = threading.Event()
        self.leaders: list[str | None] = []
        self.running = threading.Event()
        self.runs = 0
        group = view_lease_group(pipeline, "docs")

        def open_lease(on_lost: Any) -> KafkaLease:
            return KafkaLease(config, pipeline, "docs", on_lost, group=group)

        self.gate = ViewGate(open_lease, self.stop, structlog.get_logger())
        self.thread = threading.Thread(
            target=self.gate.serve, args=(self._term, self.leaders.append)
        )
        self.thread.start()

    def _term(self) -> None:
        self.runs += 1
        self.running.set()
        self.gate.term.wait()
        self.running.clear()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def test_one_gate_runs_the_view_and_the_other_takes_over(kafka_server: Any) -> None:
    config = KafkaLogConfig(
        type="kafka", bootstrap_servers=kafka_server.bootstrap_servers, session_timeout_ms=6000
    )
    pipeline = f"vs{uuid.uuid4().hex[:8]}"
    first = Member(config, pipeline)
    second: Member | None = None
    try:
        assert first.running.wait(60)
        second = Member(config, pipeline)
        wait_for(lambda: second is not None and second.leaders, 60, 0.1)
        assert second.runs == 0 and " at " in second.leaders[0]
        first.close()  # its term ends before its lease is let go
        assert not first.running.is_set()
        assert second.running.wait(60)
        assert (first.runs, second.runs) == (1, 1)
    finally:
        first.close()
        if second is not None:
            second.close()
    assert not first.thread.is_alive() and second is not None and not second.thread.is_alive()


def test_a_closed_lease_closes_its_admin_client(kafka_server: Any) -> None:
    config = KafkaLogConfig(type="kafka", bootstrap_servers=kafka_server.bootstrap_servers)
    pipeline = f"vs{uuid.uuid4().hex[:8]}"
    lease = KafkaLease(
        config, pipeline, "docs", lambda: None, group=view_lease_group(pipeline, "docs")
    )
    assert lease.group == f"{pipeline}.view.docs.leader"
    lease.close()
    with pytest.raises(LogError):
        lease._admin.describe_group(lease.group)


def test_a_standby_view_is_ready_never_stalled_and_runs_again_when_it_leads() -> None:
    health = Health(Metrics(), "p", stall_after_s=0.1, logger=structlog.get_logger())
    view = ViewHealth(health, "docs")
    view.standby()
    health.waiting("view:docs", True)  # the group lags: the leader's work, not the standby's
    time.sleep(0.15)
    health.evaluate()
    assert health.readiness() == (True, {"status": "ready", "reasons": []})
    view.serving()  # it took over: open and running
    assert health.task("view:docs").state == "running"
    view.standby()
    view.serving()  # a second term: running again, not left as a standby
    assert health.task("view:docs").state == "running"


def _process(pid: int, state: str, reason: str | None = None) -> dict[str, Any]:
    views = {"docs": {"state": state, "reason": reason}}
    return {"state": RUNNING, "host": "h", "pid": pid, "role": "all", "views": views}


def test_status_says_the_runner_s_state_and_names_the_standbys() -> None:
    standby = _process(2, "standby", "cdc-h-1 at 127.0.0.1 runs it")
    found = [standby, _process(1, "running"), _process(3, "standby")]
    assert _task_state(found, "docs") == {
        "state": "running",
        "reason": None,
        "standbys": ["h:2", "h:3"],
    }
    # The runner gone (killed, not yet taken over): the standby's word.
    assert _task_state([standby], "docs") == {
        "state": "standby",
        "reason": "cdc-h-1 at 127.0.0.1 runs it",
        "standbys": ["h:2"],
    }


def test_status_prints_the_standbys_after_the_state() -> None:
    view = {
        "view": "docs",
        "topic": "p.views.docs",
        "documents": 3,
        "lag": 0,
        "position": None,
        "behind": {},
        **_task_state([_process(1, "running"), _process(2, "standby")], "docs"),
    }
    out = io.StringIO()
    print_views([view], Console(file=out, width=200))
    assert out.getvalue() == (
        "view docs -> p.views.docs: running; 1 standby: h:2; 3 documents, 0 records behind its"
        " tables\n"
    )


def test_terms_fenced_before_any_commit_stop_the_view_after_the_limit(kafka_server: Any) -> None:
    """A takeover fences a term once; terms fenced over and over before they commit a batch
    (a batch slower than the transaction timeout) stop the view rather than take the lease
    again for ever, each round a new producer. A term that committed resets the count."""
    config = KafkaLogConfig(
        type="kafka", bootstrap_servers=kafka_server.bootstrap_servers, session_timeout_ms=6000
    )
    pipeline = f"vs{uuid.uuid4().hex[:8]}"
    group = view_lease_group(pipeline, "docs")
    stop = threading.Event()
    committed = iter([0, 2, 0, 0, 0, 0])
    terms: list[int] = []

    def open_lease(on_lost: Any) -> KafkaLease:
        return KafkaLease(config, pipeline, "docs", on_lost, group=group)

    def term() -> None:
        terms.append(next(committed))
        raise TermFenced("views: docs's transactions were fenced", terms[-1])

    gate = ViewGate(open_lease, stop, structlog.get_logger())
    told: list[str | None] = []
    try:
        with pytest.raises(LogFatal, match="3 terms in a row were fenced before they committed"):
            gate.serve(term, told.append)
    finally:
        stop.set()
    # The second term committed: the count began again after it.
    assert terms == [0, 2, 0, 0, 0]
    # After each fenced term that let the gate go on, it says it stands by (the new holder
    # not known yet), rather than leave its last term's running state.
    assert told == [None, None, None, None]
