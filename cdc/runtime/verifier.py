"""Continuous verification inside ``cdc run`` (the ``verify:`` section), where the sinks run:
every sink under the ``all`` role, a sinks worker's own under ``--role sinks``.

Every ``interval_s`` one range of the key hash space is compared, for every table of every sink
that can be read back, with the source, as ``cdc verify`` compares (:mod:`cdc.cli.verify`): the
same canonical rows, a difference counted only if it is still there a moment later (a change in
flight arrives meanwhile). The ranges rotate: the space is cut into ``2**depth`` ranges, the
depth chosen so that a range of the largest table holds about ``sample_keys`` keys, so a round
costs one streamed read of each side but canonicalises and compares a sample only, and a full
pass over every key takes ``2**depth`` rounds.

A sink that has not consumed its table's topic up to the log's end is not compared this round
(what it has yet to apply would count as differences, :func:`cdc.verify.lag.lagging`), and
the pass of that sink is not counted as full.

Exports ``cdc_verify_mismatched_keys{pipeline,sink,table}`` (the differing keys over the
ranges last compared, each range's latest count; when a pass cuts the space anew, the previous
pass's counts stand until the new ranges cover theirs) and
``cdc_verify_last_full_pass_timestamp_seconds{pipeline,sink}``. A failed round is logged and
the next one runs: verification never stops the pipeline.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cdc.config.pipeline import Pipeline
from cdc.log.base import Log
from cdc.metrics.registry import Metrics
from cdc.runtime.schemas import SchemaCatalog
from cdc.support.logging import Logger
from cdc.verify.compare import verify_pipeline
from cdc.verify.comparison import TableComparison
from cdc.verify.ranges import Range

#: A difference must still be there this long later to count (a change in flight arrives).
RECHECK_S = 1.0
MAX_DEPTH = 24


@dataclass
class Rotation:
    """Where the rotation over the hash ranges is: ``index`` of ``2**depth`` ranges, and what
    each range compared found, per ``(sink, table)``."""

    depth: int = 0
    index: int = 0
    mismatched: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    #: The counts of a pass at another depth, ``(depth, {range: count})`` per ``(sink,
    #: table)``: each range's count is kept until the ranges compared since cover it, so the
    #: differences a pass found are not forgotten when the next one cuts the space anew.
    carried: dict[tuple[str, str], tuple[int, dict[int, int]]] = field(default_factory=dict)
    #: Sinks compared in every range of the current pass so far (none skipped as lagging).
    complete: set[str] = field(default_factory=set)

    @property
    def range(self) -> Range:
        return self.depth, self.index

    def advance(self, largest: int, sample_keys: int, sinks: set[str]) -> set[str]:
        """Move to the next range; the sinks whose full pass just ended. The depth follows
        the largest table, changed only between passes (a pass covers every key once)."""
        self.index += 1
        if self.index < 1 << self.depth:
            return set()
        done, self.index = set(self.complete), 0
        self.complete = set(sinks)
        wanted = max(0, math.ceil(math.log2(max(1, largest) / sample_keys))) if largest else 0
        if min(wanted, MAX_DEPTH) != self.depth:
            for key, counts in self.mismatched.items():
                self.carried[key] = (self.depth, counts)
            self.depth, self.mismatched = min(wanted, MAX_DEPTH), {}
        return done

    def record(self, key: tuple[str, str], count: int) -> None:
        """The current range of ``key`` (sink, table) has ``count`` differing keys; the
        carried counts of ranges the compared ones now cover are dropped."""
        self.mismatched.setdefault(key, {})[self.index] = count
        if key not in self.carried:
            return
        depth, counts = self.carried[key]
        # A carried range j ends at (j + 1) / 2**depth; the ranges compared end at
        # (index + 1) / 2**self.depth (a pass goes up the space in order).
        reached = (self.index + 1) << depth
        for old in [j for j in counts if (j + 1) << self.depth <= reached]:
            del counts[old]
        if not counts:
            del self.carried[key]

    def totals(self) -> dict[tuple[str, str], int]:
        """The differing keys of each ``(sink, table)`` over its ranges last compared."""
        keys = self.mismatched.keys() | self.carried.keys()
        return {
            key: sum(self.mismatched.get(key, {}).values())
            + sum(self.carried.get(key, (0, {}))[1].values())
            for key in keys
        }


class Verifier:
    """The verification task: :meth:`serve` until ``stop`` is set."""

    def __init__(
        self,
        pipeline: Pipeline,
        log: Log,
        metrics: Metrics | None,
        stop: threading.Event,
        logger: Logger,
        sinks: Sequence[str] | None = None,
    ) -> None:
        config = pipeline.file.verify
        assert config is not None
        self._pipeline, self._log, self._metrics = pipeline, log, metrics
        self._only = set(sinks) if sinks else None  # none named: every sink, as the run's
        self._stop, self._logger = stop, logger.bind(task="verify")
        self._interval_s, self._sample_keys = config.interval_s, config.sample_keys
        self.rotation = Rotation()
        self.rotation.complete = set(self._sink_names())
        self.rounds = 0

    def serve(self) -> None:
        """A round now, then one every ``interval_s``, until stopped."""
        while not self._stop.is_set():
            try:
                self.round()
            except Exception as exc:  # never the pipeline's end: the next round tries again
                self._logger.warning("verify.round_failed", error=str(exc) or type(exc).__name__)
            if self._stop.wait(self._interval_s):
                return

    def round(self) -> list[TableComparison]:
        """Compare the current range of every table of every readable sink; move on."""
        rotation = self.rotation
        wanted = self._wanted()
        results = self._compare(wanted, rotation.range)
        largest = 0
        for result in results:
            largest = max(largest, self._record(result))
        # A sink's pass is full only if every range of every table of it was compared: not
        # while it lags, nor before the source has published a table's schema.
        compared = {(r.sink, r.table) for r in results if r.compared}
        rotation.complete -= {
            sink
            for sink, tables in wanted.items()
            if any((sink, f"{s}.{t}") not in compared for s, t in tables)
        }
        ranges = 1 << rotation.depth
        finished = rotation.advance(largest << rotation.depth, self._sample_keys, set(wanted))
        self._export(finished)
        for sink in sorted(finished):
            self._logger.info("verify.full_pass", sink=sink, ranges=ranges)
        self.rounds += 1
        return results

    def _sink_names(self) -> list[str]:
        return list(self._wanted())

    def _wanted(self) -> dict[str, list[tuple[str, str]]]:
        """The tables of each sink that can be read back (views are compared by cdc verify)."""
        from cdc.contracts import plugins

        views = {v.table for v in getattr(self._pipeline, "views", [])}
        wanted = {}
        for sink in self._pipeline.sinks:
            if self._only is not None and sink.name not in self._only:
                continue
            plugin = plugins.load(plugins.SINK_GROUP, sink.type)
            if getattr(plugin, "read_rows", None) is None:
                continue
            tables = self._pipeline.sink_tables(sink)
            wanted[sink.name] = [t for t in tables if f"{t[0]}.{t[1]}" not in views]
        return wanted

    def _compare(
        self, wanted: dict[str, list[tuple[str, str]]], at: Range
    ) -> list[TableComparison]:
        """One range of each table; a table whose sink is behind the log comes back LAGGING,
        not compared (:func:`cdc.verify.lag.lagging`), as in ``cdc verify``."""
        results = []
        catalog = SchemaCatalog(self._log, self._pipeline.name, wait_s=0)
        for sink, tables in wanted.items():
            if not tables:
                continue
            results += verify_pipeline(
                self._pipeline,
                catalog,
                attempts=2,
                wait_s=RECHECK_S,
                log=self._log,  # the lag check, and the log's envelope eras
                sinks=[sink],
                tables=[f"{s}.{t}" for s, t in tables],
                within=at if at[0] else None,
            )
        return results

    def _record(self, result: TableComparison) -> int:
        """Keep the range's count of differing keys; the table's source rows in the range."""
        if not result.compared:
            return 0  # lagging, no schema yet, not verifiable
        missing, extra, different = result.keys
        count = len(missing) + len(extra) + len(different)
        self.rotation.record((result.sink, result.table), count)
        if count:
            self._logger.warning(
                "verify.mismatched",
                sink=result.sink,
                table=result.table,
                missing=len(missing),
                extra=len(extra),
                different=len(different),
                fix="cdc verify PIPELINE_FILE --repair",
            )
        return result.source_count

    def _export(self, finished: set[str]) -> None:
        if self._metrics is None:
            return
        name = self._pipeline.name
        for (sink, table), total in self.rotation.totals().items():
            gauge = self._metrics.verify_mismatched.labels(pipeline=name, sink=sink, table=table)
            gauge.set(total)
        now = time.time()
        for sink in finished:
            self._metrics.verify_full_pass.labels(pipeline=name, sink=sink).set(now)


def verifier(
    pipeline: Pipeline, log: Log, run: Any, logger: Logger, sinks: Sequence[str] | None = None
) -> Verifier | None:
    """The run's verification task when the ``verify:`` section asks for one; ``sinks``: of
    only these sinks (a ``--role sinks`` worker's)."""
    if pipeline.file.verify is None:
        return None
    telemetry = run.telemetry
    metrics = telemetry.metrics if telemetry is not None else None
    return Verifier(pipeline, log, metrics, run.stop_event, logger, sinks)
