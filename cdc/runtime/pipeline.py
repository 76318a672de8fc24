"""Run a pipeline: one source task and one task per sink, each in its own thread.

The main thread waits for a signal or a failure. SIGINT/SIGTERM set the shared stop event; every
task notices within one poll timeout, rolls back or finishes its unit of work, and closes. A
fatal error of the source stops every task, and the process exits 1 with that error. A fatal
error of a sink stops that sink alone (:meth:`SinkTask.serve`): the source and the other sinks
go on, and at the end the process exits 1, naming the sinks that stopped.
"""

from __future__ import annotations

import faulthandler
import gc
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from types import FrameType
from typing import Any

from cdc.config.models import SinkConfig
from cdc.config.pipeline import Pipeline
from cdc.contracts import plugins
from cdc.contracts.errors import SourceMisconfigured
from cdc.log.base import Log
from cdc.log.encoding import ensure_encoding
from cdc.log.factory import open_log
from cdc.metrics import SinkObserver, Telemetry
from cdc.metrics.lag import LagClock
from cdc.runtime import fingerprints, memory, standby
from cdc.runtime.consistency import ConsistencyTracker
from cdc.runtime.control_watcher import ControlWatcher
from cdc.runtime.factories import build_sink, build_source, source_record_rows
from cdc.runtime.heartbeat import Heartbeat
from cdc.runtime.preflight import SinkCannotStart, check_sinks, is_first_start
from cdc.runtime.schemas import SchemaCatalog
from cdc.runtime.sink_names import group_name, sink_topics
from cdc.runtime.sink_task import SinkTask
from cdc.runtime.source_task import SourceTask
from cdc.runtime.verifier import verifier
from cdc.support.clock import now_ms
from cdc.support.logging import Logger, get_logger
from cdc.views.task import view_tasks

# The hot path allocates a container per decoded value and row, nearly all freed at once by
# reference counting; the default gen-0 threshold (700) runs the cycle collector thousands of
# times a second for nothing. Measured on the Redis sink bench: +20-40% rows/s.
GC_THRESHOLDS = (50_000, 20, 100)
STOP_GRACE_S = 8.0  # under the 10 s a supervisor waits before SIGKILL
# How often the log is asked whether a compaction pass is due (a cheap check; a pass runs only
# once enough was superseded). Every 60 s, a pipeline updating 10k keys at 5,000 rows/s held
# 300k-900k dead records between passes (a 320-940 MB log) and a pass long enough to be cut
# short by the writer under load.
COMPACTION_INTERVAL_S = 10.0
CONTROL_GRACE_S = 1.0


@dataclass
class TaskOutcome:
    name: str
    error: BaseException | None = None


@dataclass
class PipelineRun:
    """A running pipeline; ``stop()`` asks it to finish, ``wait()`` joins it."""

    pipeline: Pipeline
    log: Log
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    outcomes: list[TaskOutcome] = field(default_factory=list)
    source_task: SourceTask | None = None
    sink_tasks: dict[str, SinkTask] = field(default_factory=dict)
    control: ControlWatcher | None = None
    telemetry: Telemetry | None = None
    heartbeat: Heartbeat | None = None  # this process's beats, for cdc status

    def stop(self) -> None:
        self.stop_event.set()

    def progress(self) -> int:
        """Records appended by the source and applied by the sinks so far: it stands still
        while the pipeline is idle."""
        appended = 0 if self.source_task is None else self.source_task.events_appended
        return appended + sum(task.records_applied for task in self.sink_tasks.values())

    def consistent(self) -> dict[str, str]:
        """Each sink's consistent source position, where known (cdc.runtime.consistency)."""
        found = {name: task.consistent_position for name, task in self.sink_tasks.items()}
        return {name: str(position) for name, position in found.items() if position is not None}

    def failed(self) -> TaskOutcome | None:
        return next((o for o in self.outcomes if o.error is not None), None)

    def stopped_sinks(self) -> dict[str, BaseException]:
        """The sinks an error stopped (and not started again since), with the error."""
        return {
            name: task.failure for name, task in self.sink_tasks.items() if task.failure is not None
        }

    def wait(self, timeout_s: float | None = None) -> bool:
        """Join every task; True if all ended within ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for thread in self.threads:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)
        return not any(t.is_alive() for t in self.threads)


def start(
    pipeline: Pipeline,
    role: str = "all",
    sinks: list[str] | None = None,
    accept_envelope_change: bool = False,
) -> PipelineRun:
    """Start the pipeline's tasks in threads and return at once.

    Args:
        pipeline: the validated pipeline.
        role: ``all``, ``source`` (only the source task) or ``sinks`` (only sink tasks).
        sinks: with role ``sinks``, only these sinks (default: all).
        accept_envelope_change: store the file's envelope encoding where the log holds
            another (:func:`cdc.log.encoding.ensure_encoding`), instead of refusing to start.

    Raises:
        EnvelopeChanged: the log was written under another envelope encoding.
    """
    started_ms = now_ms()  # the heartbeat's: earlier than any state a task of this run records
    gc.set_threshold(*GC_THRESHOLDS)
    memory.limit_arenas()  # before any task's thread exists (cdc.runtime.memory)
    # A crash in native code (SQLite, DuckDB, librdkafka...) then leaves every thread's Python
    # stack on stderr instead of a bare exit code.
    faulthandler.enable()
    base = get_logger(pipeline=pipeline.name)
    run = _opened(pipeline, accept_envelope_change, base)
    log = run.log
    filters = fingerprints.StartPlan({})
    if role in ("all", "source"):
        try:
            filters = fingerprints.plan(pipeline, log.source_offsets(), base)
        except BaseException:
            log.close()
            raise
    if role == "all" and not _sinks_can_start(run, base):
        return run  # failed before the source created anything (cdc.runtime.preflight)
    views = {}
    views_changed = threading.Event()  # a view's state changed: the next beat says so at once
    if role in ("all", "source"):
        _start_source(run, base, filters)
        views = view_tasks(pipeline, log, run.stop_event, base, run.telemetry, views_changed)
        for name, view in views.items():
            _spawn(run, f"view:{name}", view.serve)  # live join views (cdc/views/)
    if role in ("all", "sinks"):
        _start_sinks(run, base, sinks)
    # The verify: section (cdc/runtime/verifier.py) runs where the sinks do: a sinks worker
    # checks its own sinks.
    check = None
    if role in ("all", "sinks"):
        check = verifier(pipeline, log, run, base, sinks if role == "sinks" else None)
    if check is not None:
        _spawn(run, "verify", check.serve)
    if run.telemetry is not None:
        _sample(run, run.telemetry)
    run.heartbeat = Heartbeat(
        log,
        pipeline.name,
        role,
        sinks,
        run.stop_event,
        base,
        consistent=run.consistent,
        views=(lambda: {name: view.report() for name, view in views.items()}) if views else None,
        changed=views_changed,
        started_ms=started_ms,
    )
    run.heartbeat.start()
    compact = getattr(log, "maybe_compact", None)
    if compact is not None and role in ("all", "source"):
        _spawn(run, "compaction", lambda: _compaction_loop(compact, run.stop_event))
    _spawn(run, "memory", lambda: memory.trim_when_idle(run.stop_event, run.progress))
    return run


def _opened(pipeline: Pipeline, accept_envelope_change: bool, base: Logger) -> PipelineRun:
    """The run with its log open, its envelope encoding checked and its metrics endpoint up
    (if asked); the log is closed again when either fails."""
    log = open_log(pipeline)
    try:
        ensure_encoding(log, pipeline.name, pipeline.envelope, accept_envelope_change, base)
        run = PipelineRun(pipeline=pipeline, log=log)
        run.telemetry = _telemetry(run, base)
    except BaseException:
        log.close()
        raise
    return run


def _telemetry(run: PipelineRun, base: Logger) -> Telemetry | None:
    """The metrics endpoint, when ``metrics.listen`` (or ``--metrics-listen``) asks for it."""
    config = run.pipeline.file.metrics
    if config.listen is None:
        return None

    def dead_tasks() -> list[str]:
        return [t.name for t in run.threads if not t.is_alive()]

    return Telemetry(run.pipeline.name, config.listen, config.stall_after_s, base, dead_tasks)


def _sample(run: PipelineRun, telemetry: Telemetry) -> None:
    """Sample the tasks of this process: the source's probe, its sinks' lag."""
    pipeline = run.pipeline
    probe = None
    if run.source_task is not None:
        plugin = plugins.load(plugins.SOURCE_GROUP, pipeline.source.type)
        make_probe = getattr(plugin, "probe", None)
        if make_probe is not None:
            probe = make_probe(pipeline.source, pipeline.name)
    sinks = {
        name: (group_name(pipeline.name, name), sink_topics(pipeline, pipeline.sink(name)))
        for name in run.sink_tasks
    }
    telemetry.sample(run.log, probe, sinks)


def _start_source(run: PipelineRun, base: Logger, filters: fingerprints.StartPlan) -> None:
    pipeline, log = run.pipeline, run.log
    logger = base.bind(source=pipeline.source.type)
    lag = LagClock()
    run.source_task = SourceTask(
        pipeline.name,
        log,
        build_source(pipeline, log, logger, filters),
        run.stop_event,
        logger,
        bad_records=pipeline.file.bad_records,
        first_start_timeout_s=getattr(pipeline.source, "connect_timeout_s", None),
        envelope_options=pipeline.envelope,
        observer=None if run.telemetry is None else run.telemetry.source(lag),
        lag=lag,
        transforms=pipeline.chain(),
        table_ops={t.name: frozenset(t.ops) for t in pipeline.source.tables if t.ops},
        stored_with_first_commit={fingerprints.OFFSET_KEY: filters.store},
    )
    _spawn(run, "source", run.source_task.run)


def _start_sinks(run: PipelineRun, base: Logger, only: list[str] | None) -> None:
    """The control watcher, then a task for each sink (``only`` these, if given)."""
    pipeline, log = run.pipeline, run.log
    catalog = SchemaCatalog(log, pipeline.name)
    run.control = ControlWatcher(log, pipeline.name, run.stop_event, base)
    run.control.start()
    for config in pipeline.sinks:
        if only and config.name not in only:
            continue
        logger = base.bind(sink=config.name)
        observer = _sink_observer(run, config)
        # A single-writer sink on Kafka runs while this worker leads it (cdc.runtime.standby).
        gate = standby.gate_for(pipeline, config, run.stop_event, logger, observer)
        task = SinkTask(
            pipeline.name,
            config.name,
            log,
            build_sink(pipeline, config, catalog, logger),
            sink_topics(pipeline, config),
            run.stop_event if gate is None else gate.term,
            logger,
            bad_records=pipeline.file.bad_records,
            max_records=config.batch_records,
            max_bytes=config.batch_bytes,
            control=run.control,
            tables=pipeline.sink_tables(config),
            observer=observer,
            rows=source_record_rows(pipeline),
            consistency=consistency_tracker(pipeline, config, log),
        )
        run.sink_tasks[config.name] = task
        serve = task.serve if gate is None else partial(gate.serve, task)
        _spawn(run, f"sink:{config.name}", serve)


def consistency_tracker(
    pipeline: Pipeline, config: SinkConfig, log: Log
) -> ConsistencyTracker | None:
    """The sink's consistent-position tracker, when the source plugin decodes positions (its
    ``position`` hook)."""
    decode = getattr(plugins.load(plugins.SOURCE_GROUP, pipeline.source.type), "position", None)
    if decode is None:
        return None
    # On Kafka each sample reads the offsets topic to its end: as often as the heartbeat goes.
    every_s = 0.2 if pipeline.log.type == "embedded" else 5.0
    group = group_name(pipeline.name, config.name)
    return ConsistencyTracker(log, group, sink_topics(pipeline, config), decode, every_s)


def _sink_observer(run: PipelineRun, config: SinkConfig) -> SinkObserver | None:
    if run.telemetry is None:
        return None
    return run.telemetry.sink(config.name, sink_topics(run.pipeline, config))


def _sinks_can_start(run: PipelineRun, logger: Logger) -> bool:
    """At a first start, open each sink once before the source runs; False (the failure
    recorded in ``run``) when one cannot start at all."""
    pipeline = run.pipeline
    if not is_first_start(run.log):
        return True
    catalog = SchemaCatalog(run.log, pipeline.name)
    # A single-writer sink on Kafka is opened only by the worker holding its lease, and this
    # one may be a standby: the leader's lock would fail the check (DuckDB, JSON lines), and on
    # another host it would open a store the leader does not use. So it is not checked here
    # (as with `--role source`); its task reports a store that cannot work. Taking the lease
    # here instead would mean waiting for it, or for a leader elsewhere, before the source runs.
    factories = {
        c.name: build_sink(pipeline, c, catalog, logger.bind(sink=c.name))
        for c in pipeline.sinks
        if not standby.leased(pipeline, c)
    }
    try:
        check_sinks(factories, logger)
    except SinkCannotStart as exc:
        run.outcomes.append(TaskOutcome(f"sink:{exc.sink}", exc))
        run.stop_event.set()
        return False
    return True


def _compaction_loop(compact: Callable[[], Any], stop: threading.Event) -> None:
    while not stop.wait(COMPACTION_INTERVAL_S):
        compact()


def _spawn(run: PipelineRun, name: str, target: Callable[[], None]) -> None:
    outcome = TaskOutcome(name)
    run.outcomes.append(outcome)

    def body() -> None:
        try:
            target()
        except BaseException as exc:
            outcome.error = exc
            run.stop_event.set()  # one fatal task stops the pipeline

    thread = threading.Thread(target=body, name=name, daemon=True)
    run.threads.append(thread)
    thread.start()


def run_until_signalled(
    pipeline: Pipeline,
    role: str = "all",
    sinks: list[str] | None = None,
    accept_envelope_change: bool = False,
) -> int:
    """Run until SIGINT/SIGTERM or a fatal error; returns the process exit code."""
    from cdc.metrics.progress import TerminalProgress  # rich's import only where a run starts

    logger = get_logger(pipeline=pipeline.name)
    progress = TerminalProgress(pipeline, role)  # before start: it claims the terminal
    # Installed before the start, which can take long (a slot waiting for a transaction to
    # end): a signal then stops the run as soon as it stands, cleanly, where the default
    # action killed the process. A second signal before that is the default action.
    requested: list[PipelineRun] = []
    stopping = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if stopping.is_set() and not requested:
            sig = signal.Signals(signum)
            signal.signal(sig, previous[sig])
            signal.raise_signal(sig)
            return
        stopping.set()
        logger.info("pipeline.stopping", signal=signal.Signals(signum).name)
        if requested:
            requested[0].stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run = start(pipeline, role, sinks, accept_envelope_change)
    except BaseException:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        raise
    requested.append(run)
    if stopping.is_set():
        run.stop()
    if run.source_task is not None:
        progress.follow_lag(run.source_task.lag.seconds)
    try:
        logger.info("pipeline.started", role=role)
        with progress:  # a terminal's snapshot and stream display, else nothing
            while not run.stop_event.wait(0.5):
                pass
        clean = run.wait(STOP_GRACE_S)
        if run.control is not None:
            run.control.join(CONTROL_GRACE_S)  # the sinks' last states, if the log takes them
        if run.heartbeat is not None:
            run.heartbeat.join(CONTROL_GRACE_S)  # "stopped", so status says so at once
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if run.telemetry is not None:
            run.telemetry.close()
        run.log.close()
    return _exit_code(run, clean, logger)


def _exit_code(run: PipelineRun, clean: bool, logger: Logger) -> int:
    """0 for a clean stop; 1, with the reason logged, for a failed task, a task that did not
    stop in time, or sinks that an error had stopped; 2 for a file the database cannot serve
    (:class:`cdc.contracts.errors.SourceMisconfigured`)."""
    failure = run.failed()
    if failure is not None:
        logger.error(
            "pipeline.failed",
            task=failure.name,
            error=str(failure.error),
            error_type=type(failure.error).__name__,
        )
        return 2 if isinstance(failure.error, SourceMisconfigured) else 1
    if not clean:
        logger.error("pipeline.stop_timeout", grace_s=STOP_GRACE_S)
        return 1
    stopped = run.stopped_sinks()
    if stopped:
        logger.error(
            "pipeline.stopped_with_sinks_stopped",
            sinks={name: str(error) for name, error in stopped.items()},
        )
        return 1
    logger.info("pipeline.stopped")
    return 0
