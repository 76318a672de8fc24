"""The figures every bench prints last, for tools: one JSON line a metric.

``{"bench": "pg_stream", "metric": "insert_one_tx_rows_per_s", "ours": 43664.2,
"baseline": 56328.0, "ratio": 0.775}``: ``ours`` is this project's figure, ``baseline`` the
same measure of the reference the bench compares with (``null`` where there is none), and
``ratio`` is ``ours / baseline`` (``null`` without a baseline). A metric's name ends with its
unit (``_rows_per_s``, ``_ms``, ``_mb``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Figures:
    """The metrics of one bench run, printed together at its end."""

    bench: str
    metrics: list[dict[str, Any]] = field(default_factory=list)
    #: Appended to every metric's name: a variant of the run (``_schemas``).
    variant: str = ""

    def add(self, metric: str, ours: float | None, baseline: float | None = None) -> None:
        """Record one metric; a missing or NaN figure is ``null``."""
        ours, baseline = _number(ours), _number(baseline)
        ratio = None
        if ours is not None and baseline:
            ratio = round(ours / baseline, 3)
        self.metrics.append(
            {
                "bench": self.bench,
                "metric": metric + self.variant,
                "ours": ours,
                "baseline": baseline,
                "ratio": ratio,
            }
        )

    def emit(self) -> None:
        """Print every metric, one JSON line each, after everything else the bench printed."""
        sys.stdout.flush()
        for metric in self.metrics:
            print(json.dumps(metric), flush=True)


def sink_result(
    sink: str,
    changes: int,
    base: tuple[float, float],
    measured: tuple[float, float],
    target: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The figures of a sink bench (``bench/sinks_*.py``): ``changes`` applied through the sink
    task in ``measured`` (seconds, CPU seconds), against the store's own bulk path doing the same
    in ``base``; ``extra`` (record counts, batch sizes, latencies) goes in as it is."""
    (base_s, base_cpu), (sink_s, sink_cpu) = base, measured
    result: dict[str, Any] = {
        "sink": sink,
        "changes": changes,
        **extra,
        "sink_s": round(sink_s, 2),
        "sink_rows_per_s": round(changes / sink_s),
        "sink_cpu_s": round(sink_cpu, 2),
        "sink_rows_per_cpu_s": round(changes / sink_cpu),
        "baseline_s": round(base_s, 2),
        "baseline_rows_per_s": round(changes / base_s),
        "baseline_rows_per_cpu_s": round(changes / base_cpu),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }
    result["ratio_to_baseline"] = round(
        result["sink_rows_per_s"] / result["baseline_rows_per_s"], 3
    )
    result["cpu_ratio_to_baseline"] = round(
        result["sink_rows_per_cpu_s"] / result["baseline_rows_per_cpu_s"], 3
    )
    if target is not None:
        result["target_rows_per_s"] = target
        result["target_met"] = result["sink_rows_per_s"] >= target
    return result


def add_sink(figures: Figures, result: dict[str, Any]) -> None:
    """A sink bench's result (``bench/sinks_*.py``): rows per second and per CPU-second, each
    against its baseline's."""
    name = result["sink"]
    figures.add(f"{name}_rows_per_s", result["sink_rows_per_s"], result["baseline_rows_per_s"])
    figures.add(
        f"{name}_rows_per_cpu_s", result["sink_rows_per_cpu_s"], result["baseline_rows_per_cpu_s"]
    )
    if result.get("redis_benchmark_set_per_s"):  # a second baseline: redis-benchmark's SETs
        figures.add(
            f"{name}_rows_per_s_vs_redis_benchmark",
            result["sink_rows_per_s"],
            result["redis_benchmark_set_per_s"],
        )


def _number(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), 3)
