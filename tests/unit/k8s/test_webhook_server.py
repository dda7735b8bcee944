"""The webhook's HTTPS server answering real AdmissionReview POSTs over TLS on loopback."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from queuemgr.k8s.admission_handler import AdmissionHandler
from queuemgr.k8s.certs import (
    FileCertificates,
    ServingCertificate,
    StaticCertificates,
    generate,
    load_files,
    service_dns_names,
)
from queuemgr.k8s.jobs import KINDS, QUEUE_LABEL
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.k8s.webhook_registration import (
    service_client_config,
    url_client_config,
    webhook_configurations,
)
from queuemgr.k8s.webhook_server import MAX_BODY, WebhookServer
from tests.unit.k8s.directory_fixture import directory
from tests.unit.k8s.helpers import decode_patch, manifest
from tests.unit.k8s.test_admission_handler import labelled, review

CERT = generate(
    dns_names=service_dns_names("queuemgr", "queuemgr-system"), ip_addresses=["127.0.0.1"]
)


@pytest.fixture
def server() -> Iterator[WebhookServer]:
    with WebhookServer(
        AdmissionHandler(directory()), StaticCertificates(CERT), host="127.0.0.1", port=0
    ) as running:
        yield running


def _client_context(ca_pem: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem.decode())


def call(
    server: WebhookServer,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    ca: bytes = CERT.ca_pem,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    host, port = server.address
    conn = http.client.HTTPSConnection(host, port, context=_client_context(ca), timeout=10)
    try:
        conn.request(
            method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})}
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_mutate_over_tls(server: WebhookServer) -> None:
    r = review("CREATE", manifest("job-gpu"))
    status, body = call(server, "POST", "/mutate", json.dumps(r).encode())
    assert status == 200
    answer = json.loads(body)
    assert answer["response"]["uid"] == r["request"]["uid"]
    assert decode_patch(answer) == [{"op": "add", "path": "/spec/suspend", "value": True}]


def test_validate_over_tls_denies_with_the_message(server: WebhookServer) -> None:
    r = review("CREATE", labelled("job-gpu", "defualt"))
    status, body = call(server, "POST", "/validate", json.dumps(r).encode())
    assert status == 200
    response = json.loads(body)["response"]
    assert response["allowed"] is False
    assert 'did you mean "default"?' in response["status"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        pytest.param("GET", "/healthz", None, 200, id="healthz"),
        pytest.param("GET", "/readyz", None, 200, id="readyz"),
        pytest.param("GET", "/nope", None, 404, id="unknown-get"),
        pytest.param("POST", "/other", b"{}", 404, id="unknown-post"),
        pytest.param("POST", "/validate", b"garbage", 400, id="not-a-review"),
        pytest.param("POST", "/mutate", b'{"kind": "AdmissionReview"}', 400, id="no-version"),
    ],
)
def test_routes(
    server: WebhookServer, method: str, path: str, body: bytes | None, status: int
) -> None:
    assert call(server, method, path, body)[0] == status


def test_oversized_body_is_refused_unread(server: WebhookServer) -> None:
    status, _ = call(
        server, "POST", "/validate", b"{}", headers={"Content-Length": str(MAX_BODY + 1)}
    )
    assert status == 413


def _raw(server: WebhookServer, header: bytes, body: bytes) -> bytes:
    """POST /validate with one framing header and the start of a body that never ends;
    the first bytes of the answer (a timeout if the server waits for the rest)."""
    host, port = server.address
    context = _client_context(CERT.ca_pem)
    with (
        socket.create_connection((host, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n\r\n" + body)
        return tls.recv(4096)


@pytest.mark.parametrize(
    ("length", "status"),
    [
        pytest.param("-1", 400, id="negative"),  # read to end of stream, before the fix
        pytest.param("-99999999", 400, id="very-negative"),
        pytest.param("", 411, id="empty"),
        pytest.param("two", 411, id="not-a-number"),
    ],
)
def test_a_bad_content_length_is_refused_at_once(
    server: WebhookServer, length: str, status: int
) -> None:
    # http.client would send its own length: a raw request, and a body that never ends.
    answer = _raw(server, f"Content-Length: {length}".encode(), b"{" * 4096)
    assert answer.startswith(f"HTTP/1.0 {status} ".encode()) or answer.startswith(
        f"HTTP/1.1 {status} ".encode()
    ), answer[:80]


def test_a_client_trusting_another_ca_is_refused(server: WebhookServer) -> None:
    other = generate(dns_names=["queuemgr"], ip_addresses=["127.0.0.1"])
    with pytest.raises(ssl.SSLCertVerificationError):
        call(server, "GET", "/healthz", ca=other.ca_pem)
    assert call(server, "GET", "/healthz")[0] == 200  # and the server carries on


def test_generated_certificate_shape() -> None:
    ca = x509.load_pem_x509_certificate(CERT.ca_pem)
    leaf = x509.load_pem_x509_certificate(CERT.cert_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.path_length == 0
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "queuemgr",
        "queuemgr.queuemgr-system",
        "queuemgr.queuemgr-system.svc",
        "queuemgr.queuemgr-system.svc.cluster.local",
    ]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    leaf.verify_directly_issued_by(ca)
    with pytest.raises(ValueError, match="at least one"):
        generate(dns_names=[])


def _write(directory: Path, cert: ServingCertificate) -> tuple[Path, Path]:
    crt, key = directory / "tls.crt", directory / "tls.key"
    crt.write_bytes(cert.cert_pem)
    key.write_bytes(cert.key_pem)
    (directory / "ca.crt").write_bytes(cert.ca_pem)
    return crt, key


def _served_serial(server: WebhookServer, ca: bytes) -> int:
    host, port = server.address
    with _client_context(ca).wrap_socket(
        socket.create_connection((host, port), timeout=10), server_hostname=host
    ) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_mounted_secret_is_served_and_reloaded_when_rotated(tmp_path: Path) -> None:
    first, second = (
        generate(dns_names=["q"], ip_addresses=["127.0.0.1"]),
        generate(dns_names=["q"], ip_addresses=["127.0.0.1"]),
    )
    crt, key = _write(tmp_path, first)
    assert load_files(crt, key, tmp_path / "ca.crt") == first
    source = FileCertificates(crt, key, check_every=0.0)
    with WebhookServer(AdmissionHandler(directory()), source, host="127.0.0.1", port=0) as server:
        assert (
            _served_serial(server, first.ca_pem)
            == x509.load_pem_x509_certificate(first.cert_pem).serial_number
        )
        _write(tmp_path, second)
        assert (
            _served_serial(server, second.ca_pem)
            == x509.load_pem_x509_certificate(second.cert_pem).serial_number
        )
        assert source.reloads == 1
        key.write_bytes(b"half-written")  # a broken pair keeps the previous one in service
        assert call(server, "GET", "/healthz", ca=second.ca_pem)[0] == 200


def test_webhook_configurations() -> None:
    mutating, validating = webhook_configurations(
        mutate_client=service_client_config("queuemgr", "queuemgr-system", "/mutate"),
        validate_client=url_client_config("https://127.0.0.1:9443/", "/validate"),
        ca_bundle=CERT.ca_pem,
        namespace_selector=LabelSelector.parse("queuemgr.io/managed=true"),
    )
    (m,), (v,) = mutating["webhooks"], validating["webhooks"]
    for hook in (m, v):
        assert hook["failurePolicy"] == "Fail"
        assert hook["sideEffects"] == "None"
        assert hook["objectSelector"] == {
            "matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]
        }
        assert hook["namespaceSelector"] == {"matchLabels": {"queuemgr.io/managed": "true"}}
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == CERT.ca_pem
        assert {r["resources"][0] for r in hook["rules"]} == {k.PLURAL for k in KINDS}
    assert {tuple(r["operations"]) for r in m["rules"]} == {("CREATE",)}
    assert {tuple(r["operations"]) for r in v["rules"]} == {("CREATE", "UPDATE")}
    assert m["clientConfig"]["service"]["path"] == "/mutate"
    assert v["clientConfig"]["url"] == "https://127.0.0.1:9443/validate"
    assert m["reinvocationPolicy"] == "IfNeeded"


def _server_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("Thread-"))


def _wait(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_slow_clients_hold_at_most_the_connection_budget_of_threads() -> None:
    """100 clients that connect and never start TLS (a slowloris) get at most
    ``max_connections`` threads; the rest are closed at once, and once the slow ones
    go, the webhook answers again. Without a budget, each one held a thread."""
    budget = 4
    before = _server_threads()
    with WebhookServer(
        AdmissionHandler(directory()),
        StaticCertificates(CERT),
        host="127.0.0.1",
        port=0,
        max_connections=budget,
    ) as running:
        slow = [socket.create_connection(running.address, timeout=5) for _ in range(100)]
        try:
            # Most are refused at once (a few more are served as the first ones' handshakes
            # fail), and never more than the budget hold a thread.
            assert _wait(lambda: running.refused >= 75), running.refused
            for _ in range(20):
                assert _server_threads() - before <= budget
                time.sleep(0.02)
        finally:
            for sock in slow:
                sock.close()
        assert _wait(lambda: _server_threads() == before)
        r = review("CREATE", manifest("job-gpu"))
        assert call(running, "POST", "/mutate", json.dumps(r).encode())[0] == 200


def test_a_chunked_body_without_a_length_is_refused_at_once(server: WebhookServer) -> None:
    """Chunked bodies are not taken at all: 411 before a byte of the endless body is read."""
    answer = _raw(server, b"Transfer-Encoding: chunked", b"1000\r\n" + b"{" * 4096 + b"\r\n")
    assert answer.split(b" ", 2)[1] == b"411", answer[:80]


GPU_FIELD = "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu"


def _gpus(value: str) -> bytes:
    job = manifest("job-gpu")
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = (
        value
    )
    return json.dumps(review("CREATE", job)).encode()


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("1e10000000", id="huge-exponent"),  # 500 after about 11 s, before
        pytest.param("9" * 5000, id="5000-digits"),  # Python's int() limit: a 500
        pytest.param("1e30", id="past-int64"),
    ],
)
def test_a_quantity_past_int64_is_denied_naming_the_field(
    server: WebhookServer, value: str
) -> None:
    status, body = call(server, "POST", "/validate", _gpus(value))
    assert status == 200, body[:200]
    response = json.loads(body)["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(f"{GPU_FIELD}: quantity out of range")


def test_hostile_requests_leave_the_other_threads_running(server: WebhookServer) -> None:
    """The webhook shares its process with the scheduling loop: while 32 hostile reviews
    are answered, a thread standing for the loop keeps its 5 ms beat, and /healthz answers.
    Before the quantity bounds, one huge exponent held the interpreter for about 11 s."""
    gaps: list[float] = []
    done = threading.Event()

    def beat() -> None:
        last = time.monotonic()
        while not done.is_set():
            time.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    loop = threading.Thread(target=beat, daemon=True)
    loop.start()
    hostile = [_gpus("1e10000000"), _gpus("9" * 5000)]
    workers = [
        threading.Thread(target=call, args=(server, "POST", "/validate", hostile[i % 2]))
        for i in range(32)
    ]
    for w in workers:
        w.start()
    health = call(server, "GET", "/healthz")
    for w in workers:
        w.join(timeout=30)
    done.set()
    loop.join(timeout=5)
    assert health[0] == 200
    assert max(gaps) < 0.5, max(gaps)
