"""A throwaway Prometheus server (Debian's ``prometheus``) that scrapes given targets.

``LocalPrometheus(targets)`` writes a config that scrapes each ``host:port`` every
``scrape_interval_s``, runs the server on a free loopback port with its TSDB in a temp dir, and
answers instant queries through the HTTP API (``query``). ``promtool`` (the same package) checks
exposition text and rule files (``promtool_check``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from tests.services.common import Service, ServiceError, ServiceUnavailableError
from tests.services.ports import LOOPBACK, free_port


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ServiceUnavailableError(f"{name} not found (apt-get install prometheus; `make apt`)")
    return found


def promtool_check(
    kind: str, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``promtool check <kind> ARGS`` (``metrics`` reads stdin), its output captured."""
    return subprocess.run(
        [_binary("promtool"), "check", kind, *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


class LocalPrometheus(Service):
    """A private Prometheus scraping ``targets`` (``host:port``, path ``/metrics``)."""

    name = "prometheus"

    def __init__(self, targets: Sequence[str], scrape_interval_s: float = 1.0) -> None:
        self.binary = _binary("prometheus")
        super().__init__()
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self._port: int | None = None

    @property
    def url(self) -> str:
        if self._port is None:
            raise ServiceError("prometheus: not started yet")
        return f"http://{LOOPBACK}:{self._port}"

    def _start(self) -> None:
        self._port = free_port()
        config = self.workdir / "prometheus.yml"
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        config.write_text(
            json.dumps(  # YAML is a superset of JSON
                {
                    "global": {"scrape_interval": interval, "evaluation_interval": interval},
                    "scrape_configs": [
                        {"job_name": "cdc", "static_configs": [{"targets": self.targets}]}
                    ],
                }
            )
        )
        self._process = self._launch(
            [
                self.binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={LOOPBACK}:{self._port}",
                "--log.level=warn",
            ],
            log=self.workdir / "prometheus.log",
            ready=self._ready,
            timeout=60,
            interval=0.2,
        )

    def _forget_ports(self) -> bool:
        self._port = None
        return True

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector of ``promql`` now: ``[{"metric": {...}, "value": [t, "v"]}]``."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise ServiceError(f"prometheus: query {promql!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def value(self, promql: str) -> float | None:
        """The one sample of ``promql`` now, or ``None`` when it has none."""
        result = self.query(promql)
        if not result:
            return None
        if len(result) > 1:
            raise ServiceError(f"prometheus: {promql!r} has {len(result)} series, not one")
        return float(result[0]["value"][1])

    def targets_up(self) -> bool:
        """Every target was scraped successfully at least once."""
        result = self.query("up")
        return len(result) == len(self.targets) and all(r["value"][1] == "1" for r in result)
