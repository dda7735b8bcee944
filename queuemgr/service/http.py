"""The service's HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

Why it exists: Prometheus scrapes ``/metrics``; an orchestrator restarts a
process whose ``/healthz`` fails and routes nothing to one whose ``/readyz``
fails. A database outage must make the service unready, never unhealthy:
restarting it would not bring Postgres back.

What must stay true: ``/healthz`` depends on nothing outside the process;
``/readyz`` is 200 only when the database answers, the loop thread runs and
its cycles have not all failed for longer than ``app.LOOP_FAILURE_GRACE``;
the server binds loopback by default and serves each request in a thread, so a
slow database check never blocks a scrape.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from queuemgr.metrics import SchedulerMetrics

# (ok, reason) probes; each must return quickly.
Probe = Callable[[], tuple[bool, str]]


class HttpServer:
    def __init__(
        self, *, host: str, port: int, metrics: SchedulerMetrics, healthy: Probe, ready: Probe
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": lambda: (200, "text/plain; version=0.0.4", metrics.render()),
            "/healthz": lambda: _probe(healthy),
            "/readyz": lambda: _probe(ready),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                status, ctype, body = route() if route else (404, "text/plain", b"not found\n")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # scrapes every few seconds would drown the service's own log

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="queuemgr-http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _probe(probe: Probe) -> tuple[int, str, bytes]:
    try:
        ok, reason = probe()
    except Exception as exc:  # a probe that fails is a "no", never a 500 with a traceback
        ok, reason = False, f"{type(exc).__name__}: {exc}"
    return (200 if ok else 503), "text/plain", f"{'ok' if ok else 'not ok'}: {reason}\n".encode()
