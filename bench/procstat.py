"""What a child process costs, read from ``/proc`` while it runs: CPU seconds, RSS, peak RSS.

The benches that compare two programs (``bench/peer_debezium.py``) or watch one grow
(``bench/scale.py``) run each in its own process and read it from outside, the same way for a
JVM as for ``cdc run``: ``utime + stime`` of every thread (``/proc/<pid>/stat``), ``VmRSS`` and
the kernel's high-water mark ``VmHWM`` (``/proc/<pid>/status``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStats:
    """One running process, by pid (Linux only)."""

    pid: int

    def cpu_s(self) -> float:
        """User plus system CPU seconds of every thread so far."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        # The command name (field 2) may hold spaces: the fields after it start past its ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15)

    def rss_mb(self) -> float:
        """Resident memory now."""
        return self._status_kb("VmRSS") / 1024

    def peak_mb(self) -> float:
        """The most resident memory the process held so far."""
        return self._status_kb("VmHWM") / 1024

    def _status_kb(self, name: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1])
        raise LookupError(f"{name} not in /proc/{self.pid}/status")


def load() -> str:
    """The machine's load average, as the README quotes it beside a figure."""
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (5 min {five:.2f}), {os.cpu_count()} CPUs"
