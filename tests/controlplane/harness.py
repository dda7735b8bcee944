"""Run a real Kubernetes control plane on 127.0.0.1 for the integration tests.

:func:`start_control_plane` starts etcd, then kube-apiserver (static-token
authentication, ``Node,RBAC`` authorization, service-account signing keys,
serving certificates from a throwaway CA), waits for ``/readyz``, and
optionally kube-controller-manager and kube-scheduler, each with its own
kubeconfig and identity. Every port is picked free at start, so several test
workers can each run their own. Leaving the context stops everything.

There is no kubelet: :func:`add_gpu_node` registers ``Node`` objects with
``nvidia.com/gpu`` capacity and makes them Ready through the status
subresource, so the scheduler binds pods to them; the pods never run, and
:func:`set_pod_phase` plays the kubelet's part when a test needs a pod to
finish. The node lifecycle controller is off, so nothing marks these
heartbeat-less nodes unreachable (and nothing would lift the not-ready taint
new nodes get, so :func:`add_gpu_node` lifts it).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import ipaddress
import json
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.controlplane.build import Binaries

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Controllers that need a kubelet or a cloud to make sense. node-lifecycle would
# mark the fake nodes unreachable (no heartbeats) and taint them.
DISABLED_CONTROLLERS = ("node-lifecycle-controller",)


class ControlPlaneError(RuntimeError):
    """A control plane process failed to start or to become ready."""


@dataclass(frozen=True)
class User:
    name: str
    token: str
    groups: tuple[str, ...] = ()


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` (``0``: SIGKILL at once).

        The apiserver's graceful shutdown waits up to a minute for open watches.
        """
        if self.popen.poll() is not None:
            return
        if timeout > 0:
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
                return
            except subprocess.TimeoutExpired:
                pass
        self.popen.kill()
        self.popen.wait()


@dataclass
class ControlPlane:
    """A running control plane: where it is and how to talk to it."""

    url: str
    ca_file: Path
    admin_token: str
    version: str
    workdir: Path
    binaries: Binaries
    users: dict[str, User]
    processes: list[_Process] = field(default_factory=list)
    startup_seconds: dict[str, float] = field(default_factory=dict)
    _restart: Callable[[float], float] | None = field(default=None, repr=False)

    def restart_apiserver(self, grace: float = 0.0) -> float:
        """Stop kube-apiserver and start it again on the same port and etcd; return
        the seconds it was away (until ``/readyz``). Watches break, stored objects
        stay. ``grace`` 0 kills it (a crash); otherwise SIGTERM with that bound."""
        if self._restart is None:
            raise ControlPlaneError("this control plane cannot restart its apiserver")
        return self._restart(grace)

    def token(self, user: str) -> str:
        return self.users[user].token

    def api_client(self, token: str | None = None, **config: Any) -> ApiClient:
        """An official ``kubernetes`` client for this apiserver (admin unless ``token``).

        Extra keyword arguments are set on the ``Configuration`` (e.g. ``retries``
        or ``connection_pool_maxsize``).
        """
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.api_key = {"BearerToken": token or self.admin_token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        for key, value in config.items():
            setattr(configuration, key, value)
        return client.ApiClient(configuration)

    def kubeconfig(self, user: str = "admin") -> Path:
        """A kubeconfig file for ``user`` (for kubectl or ``config.load_kube_config``)."""
        path = self.workdir / f"{user}.kubeconfig"
        if not path.exists():
            _write_kubeconfig(path, self.url, self.ca_file, self.token(user), user)
        return path

    def kubectl(self, *args: str, user: str = "admin", check: bool = True) -> str:
        """Run the harness's kubectl against this apiserver; return its stdout."""
        command = [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig(user)}", *args]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A bound token for a ServiceAccount (created if missing), via TokenRequest."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self.api_client() as api_client:
            core = client.CoreV1Api(api_client)
            try:
                core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
            except ApiException as error:
                if error.status != 409:
                    raise
            request = core.create_namespaced_service_account_token(
                name, namespace, {"spec": {"expirationSeconds": seconds}}
            )
            return str(request.status.token)


# ---------------------------------------------------------------------------
# certificates and keys


def _write_key(path: Path, key: Any) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_certificates(directory: Path) -> None:
    """ca.crt, apiserver.crt/.key (for 127.0.0.1 and the in-cluster names), sa.key/.pub."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "queuemgr-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    service_ip = next(ipaddress.ip_network(SERVICE_CIDR).hosts())
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(service_ip),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
    ]
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "apiserver.crt").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    _write_key(directory / "apiserver.key", server_key)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(directory / "sa.key", sa_key)
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def _write_kubeconfig(path: Path, url: str, ca_file: Path, token: str, user: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": url, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


def _write_token_file(path: Path, users: Sequence[User]) -> None:
    lines = []
    for user in users:
        groups = ",".join(user.groups)
        lines.append(
            f'{user.token},{user.name},{user.name},"{groups}"'
            if groups
            else f"{user.token},{user.name},{user.name}"
        )
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


# ---------------------------------------------------------------------------
# processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec hook so a child is killed if the test process dies without teardown.

    SIGKILL, not SIGTERM: the apiserver's graceful shutdown waits on an etcd
    that dies at the same moment.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL)

    return hook


def _spawn(name: str, argv: Sequence[str], logs: Path) -> _Process:
    log = logs / f"{name}.log"
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_parent_death_signal(),  # prctl only: no locks taken before exec
        )
    return _Process(name, popen, log)


def _wait_ready(
    process: _Process,
    url: str,
    timeout: float,
    context: ssl.SSLContext | None = None,
    headers: Mapping[str, str] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise ControlPlaneError(
                f"{process.name} exited with status {process.popen.returncode}"
                f" before it was ready; log {process.log}:\n{process.tail()}"
            )
        request = urllib.request.Request(url, headers=dict(headers or {}))
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                if response.status == 200:
                    return
                last = f"HTTP {response.status}"
        except urllib.error.HTTPError as error:
            last = f"HTTP {error.code}"
        except (OSError, ssl.SSLError) as error:
            last = str(error)
        time.sleep(0.1)
    raise ControlPlaneError(
        f"{process.name} not ready at {url} after {timeout:.0f} s ({last});"
        f" log {process.log}:\n{process.tail()}"
    )


@dataclass(frozen=True)
class _Launch:
    """How to start one process on ``ports`` free ports and where it says it is ready."""

    name: str
    argv: Callable[[list[int]], list[str]]
    ready_url: Callable[[list[int]], str]
    ports: int = 1
    context: ssl.SSLContext | None = None
    headers: Mapping[str, str] | None = None


PORT_ATTEMPTS = 3


def _launch(
    launches: Sequence[_Launch], logs: Path, processes: list[_Process], timeout: float
) -> list[list[int]]:
    """Start all of ``launches`` at once, then wait for each; return their ports.

    A port is picked free, then bound by the process a moment later: another
    worker can take it in between. A process that dies saying so is started
    again on new ports.
    """
    running: list[tuple[_Launch, list[int], _Process]] = []
    for launch in launches:
        ports = [free_port() for _ in range(launch.ports)]
        process = _spawn(launch.name, launch.argv(ports), logs)
        processes.append(process)
        running.append((launch, ports, process))
    result = []
    for launch, ports, process in running:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                _wait_ready(
                    process, launch.ready_url(ports), timeout, launch.context, launch.headers
                )
                break
            except ControlPlaneError:
                lost_port = process.popen.poll() is not None and (
                    "address already in use" in process.tail(10)
                )
                if attempt == PORT_ATTEMPTS or not lost_port:
                    raise
                processes.remove(process)
                ports = [free_port() for _ in range(launch.ports)]
                process = _spawn(launch.name, launch.argv(ports), logs)
                processes.append(process)
        result.append(ports)
    return result


def _restart(
    launch: _Launch,
    ports: list[int],
    logs: Path,
    processes: list[_Process],
    grace: float,
    timeout: float = 120,
) -> float:
    started = time.monotonic()
    index = next(i for i, process in enumerate(processes) if process.name == launch.name)
    processes[index].stop(grace)
    processes[index] = process = _spawn(launch.name, launch.argv(ports), logs)
    _wait_ready(process, launch.ready_url(ports), timeout, launch.context, launch.headers)
    return time.monotonic() - started


def _insecure_context() -> ssl.SSLContext:
    # Only for the health endpoints of controller-manager and scheduler, which
    # serve a self-signed certificate of their own.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@contextlib.contextmanager
def start_control_plane(
    binaries: Binaries,
    workdir: Path,
    *,
    controllers: bool = True,
    extra_users: Sequence[User] = (),
    apiserver_args: Sequence[str] = (),
    timeout: float = 120.0,
) -> Iterator[ControlPlane]:
    """Start etcd and kube-apiserver (and, with ``controllers``, kube-controller-manager
    and kube-scheduler) in ``workdir``; stop them all on exit.

    Users with static tokens: ``admin`` (``system:masters``), ``nobody`` (no
    permissions beyond ``system:authenticated``), the controller-manager's and
    scheduler's own identities, and ``extra_users``.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    pki = workdir / "pki"
    logs = workdir / "logs"
    data = workdir / "etcd-data"
    for directory in (pki, logs):
        directory.mkdir(exist_ok=True)
    shutil.rmtree(data, ignore_errors=True)
    timings: dict[str, float] = {}
    started = time.monotonic()
    _write_certificates(pki)
    users = [
        User("admin", secrets.token_hex(16), ("system:masters",)),
        User("nobody", secrets.token_hex(16)),
        User("system:kube-controller-manager", secrets.token_hex(16)),
        User("system:kube-scheduler", secrets.token_hex(16)),
        *extra_users,
    ]
    _write_token_file(pki / "tokens.csv", users)
    by_name = {user.name: user for user in users}
    processes: list[_Process] = []
    try:

        def etcd_argv(ports: list[int]) -> list[str]:
            client_url, peer_url = (f"http://127.0.0.1:{port}" for port in ports)
            return [
                str(binaries.etcd),
                "--name=queuemgr-test",
                f"--data-dir={data}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=queuemgr-test={peer_url}",
                "--unsafe-no-fsync",  # throwaway data: durability costs seconds per test
                "--log-level=warn",
            ]

        etcd_ports = _launch(
            [
                _Launch(
                    "etcd",
                    etcd_argv,
                    lambda ports: f"http://127.0.0.1:{ports[0]}/health",
                    ports=2,
                )
            ],
            logs,
            processes,
            timeout,
        )[0]
        etcd_url = f"http://127.0.0.1:{etcd_ports[0]}"
        timings["etcd"] = time.monotonic() - started

        admin = by_name["admin"].token

        def apiserver_argv(ports: list[int]) -> list[str]:
            return [
                str(binaries.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports[0]}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={pki / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--anonymous-auth=false",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--profiling=false",
                # 127.0.0.1 can't be an endpoint of the in-cluster `kubernetes`
                # Service (loopback is refused); nothing in-cluster needs it.
                "--endpoint-reconciler-type=none",
                # Front-proxy settings, so delegated authentication (controller-
                # manager, scheduler, webhooks) finds a complete configmap.
                f"--requestheader-client-ca-file={pki / 'ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                *apiserver_args,
            ]

        ca_context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        apiserver_launch = _Launch(
            "kube-apiserver",
            apiserver_argv,
            lambda ports: f"https://127.0.0.1:{ports[0]}/readyz",
            context=ca_context,
            headers={"Authorization": f"Bearer {admin}"},
        )
        apiserver_port = _launch([apiserver_launch], logs, processes, timeout)[0][0]
        url = f"https://127.0.0.1:{apiserver_port}"
        timings["kube-apiserver"] = time.monotonic() - started

        plane = ControlPlane(
            url=url,
            ca_file=pki / "ca.crt",
            admin_token=admin,
            version=binaries.kubernetes_version,
            workdir=workdir,
            binaries=binaries,
            users=by_name,
            processes=processes,
            startup_seconds=timings,
        )
        plane._restart = lambda grace: _restart(
            apiserver_launch, [apiserver_port], logs, processes, grace
        )
        if controllers:
            _start_controllers(plane, binaries, pki, logs, processes, timeout)
            timings["controllers"] = time.monotonic() - started
        yield plane
    finally:
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(data, ignore_errors=True)


def _start_controllers(
    plane: ControlPlane,
    binaries: Binaries,
    pki: Path,
    logs: Path,
    processes: list[_Process],
    timeout: float,
) -> None:
    launches = []
    for name, binary, extra in (
        (
            "kube-controller-manager",
            binaries.kube_controller_manager,
            [
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--controllers=*," + ",".join(f"-{c}" for c in DISABLED_CONTROLLERS),
            ],
        ),
        ("kube-scheduler", binaries.kube_scheduler, []),
    ):
        kubeconfig = pki / f"{name}.kubeconfig"
        user = f"system:{name}"
        _write_kubeconfig(kubeconfig, plane.url, plane.ca_file, plane.token(user), user)
        certs = pki / f"{name}-certs"
        certs.mkdir(exist_ok=True)
        common = [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={certs}",
            "--leader-elect=false",
            *extra,
        ]

        def argv(ports: list[int], common: list[str] = common) -> list[str]:
            return [*common, f"--secure-port={ports[0]}"]

        launches.append(
            _Launch(
                name,
                argv,
                lambda ports: f"https://127.0.0.1:{ports[0]}/healthz",
                context=_insecure_context(),
            )
        )
    _launch(launches, logs, processes, timeout)


# ---------------------------------------------------------------------------
# fake nodes and pods


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_gpu_node(
    api_client: ApiClient,
    name: str,
    *,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    extra_resources: Mapping[str, str] | None = None,
) -> Any:
    """Register a Ready node with ``nvidia.com/gpu`` capacity (no kubelet behind it).

    Capacity and allocatable are equal. Returns the node as the apiserver has it.
    """
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **(labels or {}),
    }
    spec_taints = [dict(taint) for taint in taints]
    body = {"metadata": {"name": name, "labels": node_labels}, "spec": {"taints": spec_taints}}
    core.create_node(body)
    resources = {
        "nvidia.com/gpu": str(gpus),
        "cpu": cpu,
        "memory": memory,
        "pods": str(pods),
        **(extra_resources or {}),
    }
    now = _now()
    status = {
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake node registered by the test harness",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        }
    }
    core.patch_node_status(name, status)
    # The TaintNodesByCondition admission plugin taints every new node
    # not-ready; the (disabled) node lifecycle controller would lift it.
    return core.patch_node(name, [{"op": "add", "path": "/spec/taints", "value": spec_taints}])


def set_pod_phase(api_client: ApiClient, namespace: str, name: str, phase: str) -> Any:
    """Play the kubelet: set a pod's phase (``Running``, ``Succeeded``, ``Failed``)."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    now = _now()
    ready = "True" if phase == "Running" else "False"
    body = {
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": now},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
            ],
        }
    }
    if phase == "Running":
        body["status"]["startTime"] = now  # type: ignore[index]
    return core.patch_namespaced_pod_status(name, namespace, body)


def wait_for(
    predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        time.sleep(interval)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.controlplane.harness``: start a control plane and print how to
    reach it, until interrupted; with ``--once``, print the startup times and stop."""
    import argparse
    import sys
    import tempfile

    from tests.controlplane.build import BuildError, ensure_built

    parser = argparse.ArgumentParser(description="Run the test control plane on 127.0.0.1.")
    parser.add_argument("--once", action="store_true", help="print startup times and stop")
    parser.add_argument("--no-controllers", action="store_true", help="etcd and apiserver only")
    args = parser.parse_args(argv)
    try:
        binaries = ensure_built()
    except BuildError as error:
        print(f"controlplane: {error}", file=sys.stderr)
        return 1
    with (
        tempfile.TemporaryDirectory(prefix="queuemgr-controlplane-") as workdir,
        start_control_plane(binaries, Path(workdir), controllers=not args.no_controllers) as plane,
    ):
        times = ", ".join(f"{name} {sec:.1f} s" for name, sec in plane.startup_seconds.items())
        print(f"Kubernetes {plane.version} at {plane.url}; ready after: {times}", flush=True)
        if args.once:
            return 0
        print(f"kubeconfig: {plane.kubeconfig()}")
        print(f"kubectl: {binaries.kubectl}")
        print("Ctrl-C stops it.", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while all(process.popen.poll() is None for process in plane.processes):
                time.sleep(1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
