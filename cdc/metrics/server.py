"""The HTTP endpoint of ``cdc run`` and ``cdc sink``: ``/metrics``, ``/healthz``, ``/readyz``.

``/metrics`` is prometheus_client's own WSGI app (the text exposition format, gzip when asked);
the probes answer JSON. It runs in daemon threads of the pipeline's process, off unless the
pipeline file's ``metrics.listen`` or ``--metrics-listen`` asks for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import make_wsgi_app

from cdc.config.models import parse_listen
from cdc.contracts.errors import ConfigError
from cdc.metrics.health import Health
from cdc.metrics.registry import Metrics

Probe = Callable[[], tuple[bool, dict[str, Any]]]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr: scrapes every few seconds would drown the pipeline's."""


def application(metrics: Metrics, health: Health) -> Callable[..., Iterable[bytes]]:
    """The WSGI app: the three paths, 404 for any other."""
    exposition = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            metrics_text: Iterable[bytes] = exposition(environ, start_response)
            return metrics_text
        probe: Probe | None = {"/healthz": health.liveness, "/readyz": health.readiness}.get(path)
        if probe is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: try /metrics, /healthz or /readyz\n"]
        ok, body = probe()
        status = "200 OK" if ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "application/json")])
        return [orjson.dumps(body) + b"\n"]

    return app


class MetricsServer:
    """The endpoint, serving from a daemon thread until :meth:`close`."""

    def __init__(self, listen: str, metrics: Metrics, health: Health) -> None:
        try:
            host, port = parse_listen(listen)
        except ValueError as exc:
            raise ConfigError([("metrics.listen", str(exc))]) from exc
        try:
            self._server = make_server(
                host,
                port,
                application(metrics, health),
                server_class=_ThreadingServer,
                handler_class=_QuietHandler,
            )
        except OSError as exc:
            problem = ("metrics.listen", f"cannot listen on {listen} ({exc.strerror or exc})")
            raise ConfigError([problem]) from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics", daemon=True
        )
        self._thread.start()

    @property
    def address(self) -> str:
        """``host:port`` it listens on (the real port when 0 was asked)."""
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
