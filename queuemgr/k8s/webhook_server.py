"""The webhook's HTTPS server: ``/mutate``, ``/validate`` and ``/healthz``.

Why it exists: the API server POSTs AdmissionReviews over TLS and waits at
most the configuration's ``timeoutSeconds`` for an answer. This is a small
threaded server from the standard library around
:class:`~queuemgr.k8s.admission_handler.AdmissionHandler`; a request's work is a few
indexed reads, so threads are plenty.

What must stay true:

- TLS is negotiated per connection with the certificate source's *current*
  context, so rotated certificates are served without a restart, and the
  handshake happens in the connection's own thread (a slow client never
  blocks accepting others);
- a body that is not an AdmissionReview gets 400, a body above
  :data:`MAX_BODY` gets 413 unread, a missing length 411 and a negative one
  400 (never read to the end of the stream: chunked bodies are not taken), an
  unexpected error gets 500 (the API server then applies the failure policy);
  every answer to a well-formed review is 200;
- at most ``max_connections`` connections are served at once, each in its
  own thread; one beyond that is closed at once, unanswered (the API server
  then applies the failure policy). Slow or hostile clients thus hold a
  bounded number of threads, and the scheduling loop in the same process
  keeps its share of the interpreter;
- ``stop()`` closes the socket and returns once the serving thread ended.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from queuemgr.k8s.admission_handler import AdmissionHandler
from queuemgr.k8s.certs import CertificateSource
from queuemgr.k8s.review import BadReview

log = logging.getLogger(__name__)

MAX_BODY = 8 << 20  # an AdmissionReview holds the object and the old object (<= ~3 MiB each)
CONNECTION_TIMEOUT = 15.0  # seconds; the API server gives up after at most 30
# The API server keeps a few connections per replica; this leaves it room to spare.
MAX_CONNECTIONS = 32


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the listen backlog: a burst waits to be accepted, not retried

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        certificates: CertificateSource,
        admission: AdmissionHandler,
        healthy: Callable[[], tuple[bool, str]],
        max_connections: int,
    ) -> None:
        self.certificates = certificates
        self.admission = admission
        self.healthy = healthy
        self.max_connections = max_connections
        self.budget = threading.BoundedSemaphore(max_connections)
        self.refused = 0  # connections closed unserved because the budget was spent
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.budget.acquire(blocking=False):
            self.refused += 1
            if self.refused & (self.refused - 1) == 0:  # 1st, 2nd, 4th...: a flood logs little
                log.warning(
                    "webhook: %d connections in service; closed one from %s (%d so far)",
                    self.max_connections,
                    client_address,
                    self.refused,
                )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.budget.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.budget.release()

    def get_request(self) -> tuple[Any, Any]:
        sock, address = self.socket.accept()
        sock.settimeout(CONNECTION_TIMEOUT)
        context = self.certificates.context()
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("webhook connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _TLSServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        conn = self.request
        if isinstance(conn, ssl.SSLSocket):
            conn.do_handshake()
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook %s - " + format, self.address_string(), *args)

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, code: int, text: str) -> None:
        self._send(code, (text + "\n").encode(), "text/plain; charset=utf-8")

    def do_GET(self) -> None:
        if self.path in ("/healthz", "/readyz"):
            ok, why = (True, "ok") if self.path == "/healthz" else self.server.healthy()
            self._text(200 if ok else 503, why)
        else:
            self._text(404, "not found")

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/mutate", "/validate"):
            self._text(404, "not found")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._text(411, "Content-Length required")
            return
        if length < 0:  # rfile.read(-1) would read to the end of the stream, unbounded
            self.close_connection = True
            self._text(400, f"bad Content-Length {length}")
            return
        if length > MAX_BODY:
            self.close_connection = True
            self._text(413, f"body of {length} bytes is above {MAX_BODY}")
            return
        body = self.rfile.read(length)
        handle = (
            self.server.admission.mutate if path == "/mutate" else self.server.admission.validate
        )
        try:
            answer = handle(body)
        except BadReview as error:
            self._text(400, str(error))
            return
        except Exception:
            log.exception("webhook %s failed", path)
            self._text(500, "internal error")
            return
        self._send(200, json.dumps(answer, separators=(",", ":")).encode())


class WebhookServer:
    """Serves the admission webhook over HTTPS in a background thread."""

    def __init__(
        self,
        admission: AdmissionHandler,
        certificates: CertificateSource,
        *,
        host: str = "0.0.0.0",
        port: int = 9443,
        ready: Callable[[], tuple[bool, str]] | None = None,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._server = _TLSServer(
            (host, port),
            _Handler,
            certificates,
            admission,
            ready or (lambda: (True, "ok")),
            max_connections,
        )
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def refused(self) -> int:
        """Connections closed unserved because ``max_connections`` were in service."""
        return self._server.refused

    @property
    def url(self) -> str:
        host, port = self.address
        return f"https://{host}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            daemon=True,
            name="queuemgr-webhook",
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> WebhookServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["MAX_BODY", "MAX_CONNECTIONS", "WebhookServer"]
