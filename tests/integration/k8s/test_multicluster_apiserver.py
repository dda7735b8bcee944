"""Multi-cluster dispatch on three real control planes: one manager, two workers.

The manager is the session's control plane (queues in Postgres, the Jobs
created there); two more control planes, started once for this module, are
the workers, each with GPU nodes and a fake kubelet that runs bound pods and
ends them after a moment. The tests check what the issue asks: a burst of 200
Jobs runs across the two workers with no double run and nothing lost, and
the loss (an apiserver stopped and restarted) and return of a worker is
survived with nothing lost and no workload held by two live clusters.

"Double run" here: at one moment, two clusters the manager counts as live
hold an unfinished copy of one workload (sampled throughout; a worker's
liveness is read before its copies are listed). A copy on a lost worker is
not counted: the manager cannot reach it, and deletes it before it uses that
worker again (docs/kubernetes.md, "Multi-cluster dispatch", limits).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy import Engine, text

from queuemgr.controller.kube_section import WorkerClusterSettings
from queuemgr.k8s.jobframework import PLACEMENT_ANNOTATION
from queuemgr.k8s.placement import recorded_admission
from queuemgr.k8s.remote import WORKER_STATUS_ANNOTATION, WorkerApi
from queuemgr.service.app import Service
from tests.controlplane import build
from tests.controlplane.harness import (
    ControlPlane,
    add_gpu_node,
    set_pod_phase,
    start_control_plane,
    wait_for,
)
from tests.integration.k8s.kube_env import POOL, KubeEnv, job_manifest, kube_env

pytestmark = [pytest.mark.integration, pytest.mark.multicluster]

WORKERS = ("east", "west")


@pytest.fixture(scope="module")
def worker_planes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ControlPlane]]:
    if not build.is_built() and build.go_command() is None:
        pytest.skip("multi-cluster tests need the Kubernetes control plane binaries (Go)")
    try:
        binaries = build.ensure_built()
    except build.BuildError as error:
        pytest.fail(f"could not build the Kubernetes control plane: {error}", pytrace=False)
    with ExitStack() as stack:
        yield {
            name: stack.enter_context(
                start_control_plane(binaries, tmp_path_factory.mktemp(f"worker-{name}"))
            )
            for name in WORKERS
        }


class WorkerKubelet:
    """Plays the kubelets of one worker: bound pods run, then succeed after ``runtime``
    seconds unless held; deleted pods go at once."""

    def __init__(self, plane: ControlPlane, namespace: str, runtime: float) -> None:
        self._client = plane.api_client()
        self._core = client.CoreV1Api(self._client)
        self.namespace = namespace
        self.runtime = runtime
        self.hold = False
        self._started: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="worker-kubelet")

    def __enter__(self) -> WorkerKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.close()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):
                self._tick()

    def _tick(self) -> None:
        now = time.monotonic()
        for pod in self._core.list_namespaced_pod(self.namespace, _request_timeout=5).items:
            meta, phase = pod.metadata, pod.status.phase
            if meta.deletion_timestamp is not None:
                with contextlib.suppress(ApiException):
                    self._core.delete_namespaced_pod(
                        meta.name, self.namespace, grace_period_seconds=0
                    )
                continue
            if pod.spec.node_name and phase == "Pending":
                with contextlib.suppress(ApiException):
                    set_pod_phase(self._client, self.namespace, meta.name, "Running")
                    self._started[meta.uid] = now
            elif phase == "Running" and not self.hold:
                since = self._started.setdefault(meta.uid, now)
                if now - since >= self.runtime:
                    with contextlib.suppress(ApiException):
                        set_pod_phase(self._client, self.namespace, meta.name, "Succeeded")


class DoubleRunSampler:
    """Samples, throughout a test, which live clusters hold an unfinished copy of each job."""

    def __init__(self, service: Service, workers: dict[str, WorkerApi]) -> None:
        assert service.kube is not None and service.kube.fleet is not None
        self.fleet = service.kube.fleet
        self.workers = workers
        self.double: list[tuple[str, list[str]]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="double-run-sampler")

    def __enter__(self) -> DoubleRunSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            holders: dict[str, list[str]] = {}
            for name, api in self.workers.items():
                if not self.fleet.live(name):  # read before the listing: see the docstring
                    continue
                try:
                    copies = api.copies()
                except Exception:
                    continue
                for copy in copies:
                    done = any(
                        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                        for c in (copy.get("status") or {}).get("conditions") or []
                    )
                    if not done:
                        key = f"{copy['metadata']['namespace']}/{copy['metadata']['name']}"
                        holders.setdefault(key, []).append(name)
            self.samples += 1
            self.double.extend((k, v) for k, v in holders.items() if len(v) > 1)


def _worker_nodes(planes: dict[str, ControlPlane], suffix: str, per_worker: int) -> list[Any]:
    made = []
    for name, plane in planes.items():
        with plane.api_client() as api:
            for i in range(per_worker):
                add_gpu_node(api, f"gpu-{suffix}-{i}", gpus=8, labels={POOL: suffix})
                made.append((plane, f"gpu-{suffix}-{i}"))
        del name
    return made


@contextlib.contextmanager
def multicluster(
    control_plane: ControlPlane,
    planes: dict[str, ControlPlane],
    engine: Engine,
    database_url: str,
    *,
    per_worker: int,
    runtime: float,
    timeout: float = 3.0,
    policy: str = "first-fit",
) -> Iterator[tuple[KubeEnv, Service, dict[str, WorkerKubelet], dict[str, WorkerApi]]]:
    with kube_env(control_plane, engine, database_url) as env, ExitStack() as stack:
        env.setup(node_count=0, nominal=10_000)
        nodes = _worker_nodes(planes, env.suffix, per_worker)
        namespace = env.namespaces[0]
        kubelets = {
            n: stack.enter_context(WorkerKubelet(p, namespace, runtime)) for n, p in planes.items()
        }
        clusters = [{"name": n, "kubeconfig": p.kubeconfig()} for n, p in planes.items()]
        service = env.start(
            worker_clusters=tuple(
                WorkerClusterSettings(name=c["name"], kubeconfig=Path(c["kubeconfig"]))
                for c in clusters
            ),
            dispatch=policy,
            worker_timeout=timeout,
            worker_poll_interval=0.3,
        )
        probes = {n: WorkerApi(n, Path(p.kubeconfig()), timeout=2.0) for n, p in planes.items()}
        try:
            yield env, service, kubelets, probes
        finally:
            env.stop()
            for api in probes.values():
                api.close()
            for plane, node in nodes:
                with plane.api_client() as api, contextlib.suppress(ApiException):
                    client.CoreV1Api(api).delete_node(node)
            for plane in planes.values():
                with plane.api_client() as api, contextlib.suppress(ApiException):
                    client.CoreV1Api(api).delete_namespace(namespace)


@contextlib.contextmanager
def apiserver_down_for(plane: ControlPlane, seconds: float) -> Iterator[None]:
    """Within it, a restart of ``plane``'s apiserver keeps it stopped ``seconds`` first."""
    process = next(p for p in plane.processes if p.name == "kube-apiserver")
    stop = process.stop

    def stop_and_wait(*args: Any, **kwargs: Any) -> None:
        stop(*args, **kwargs)
        time.sleep(seconds)

    process.stop = stop_and_wait  # type: ignore[method-assign]
    try:
        yield
    finally:
        process.stop = stop  # type: ignore[method-assign]


def _finished(engine: Engine, reason: str = "Succeeded") -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM workloads WHERE state = 'Finished' AND reason = :r"),
                {"r": reason},
            ).scalar_one()
        )


def test_a_burst_of_200_jobs_runs_across_two_workers_once_each(
    control_plane: ControlPlane,
    worker_planes: dict[str, ControlPlane],
    engine: Engine,
    database_url: str,
) -> None:
    total, rate = 200, 20.0  # Jobs, Jobs per second
    with multicluster(
        control_plane, worker_planes, engine, database_url, per_worker=2, runtime=0.5
    ) as (env, service, _kubelets, probes):
        assert service.kube is not None and service.kube.dispatch is not None
        # The manager's nodes are the workers' (2 x 2 x 8 GPUs), named by their cluster.
        wait_for(
            lambda: len(service.kube.fleet.nodes()) == 4,  # type: ignore[union-attr]
            timeout=30,
            what="the workers' nodes on the manager",
        )
        dispatch = service.kube.dispatch
        created: dict[str, float] = {}
        for name, api in dispatch.workers.items():
            original = api.create

            def timed(body: Any, original: Any = original) -> Any:
                made = original(body)
                created.setdefault(body["metadata"]["name"], time.time())
                return made

            api.create = timed  # type: ignore[method-assign]
            del name
        ns = env.namespaces[0]
        with DoubleRunSampler(service, probes) as sampler:
            began = time.monotonic()
            for i in range(total):
                env.batch.create_namespaced_job(ns, job_manifest(f"b{i}", gpus=4))
                time.sleep(max(0.0, began + (i + 1) / rate - time.monotonic()))
            wait_for(
                lambda: _finished(engine) == total,
                timeout=600,
                interval=1.0,
                what=f"{total} jobs finished",
            )
        assert sampler.double == [], sampler.double[:5]
        assert sampler.samples > 10
        # Each job ran as one copy, on one worker.
        ran: dict[str, list[str]] = {}
        for name, api in probes.items():
            for copy in api.copies():
                ran.setdefault(copy["metadata"]["name"], []).append(name)
        assert len(ran) == total and all(len(v) == 1 for v in ran.values())
        used = {v[0] for v in ran.values()}
        assert used == set(WORKERS)

        # Each manager Job shows where its copy ran and the copy's last status.
        def shown(name: str) -> dict[str, Any]:
            notes = env.job(ns, name).metadata.annotations or {}
            return dict(json.loads(notes.get(WORKER_STATUS_ANNOTATION, "{}")))

        for name in ("b0", f"b{total // 2}", f"b{total - 1}"):
            wait_for(
                lambda name=name: shown(name).get("succeeded") == 1,
                timeout=30,
                what=f"{name}'s copy's status on the manager's Job",
            )
            assert shown(name)["cluster"] == ran[name][0]
        admitted: dict[str, float | None] = {}
        for api in probes.values():
            for copy in api.copies():
                note = (copy["metadata"].get("annotations") or {}).get(PLACEMENT_ANNOTATION)
                admitted[copy["metadata"]["name"]] = recorded_admission(note)
        latencies = sorted(created[n] - a for n in created if (a := admitted.get(n)) is not None)
    p50 = statistics.median(latencies)
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    print(
        f"\nmulti-cluster dispatch latency (admitted -> copy created unsuspended) at"
        f" {rate:g} Jobs/s, {len(latencies)} Jobs: p50 {p50 * 1000:.0f} ms,"
        f" p99 {p99 * 1000:.0f} ms"
    )


def test_a_worker_lost_and_back_loses_nothing_and_runs_nothing_twice(
    control_plane: ControlPlane,
    worker_planes: dict[str, ControlPlane],
    engine: Engine,
    database_url: str,
) -> None:
    count = 8
    with multicluster(
        control_plane, worker_planes, engine, database_url, per_worker=2, runtime=1.0, timeout=1.5
    ) as (env, service, kubelets, probes):
        kube = service.kube
        assert kube is not None and kube.fleet is not None
        wait_for(lambda: len(kube.fleet.nodes()) == 4, timeout=30, what="the workers' nodes")
        for k in kubelets.values():
            k.hold = True  # the copies run until the test lets them end
        ns = env.namespaces[0]
        with DoubleRunSampler(service, probes) as sampler:
            for i in range(count):
                env.batch.create_namespaced_job(ns, job_manifest(f"l{i}", gpus=8))
            # first-fit: the first worker's 16 GPUs hold two jobs, the second's two more.
            wait_for(
                lambda: len(kube.fleet.dispatched()) == 4, timeout=60, what="4 jobs dispatched"
            )
            on_east = sorted(w for w, c in kube.fleet.dispatched().items() if c == "east")
            assert len(on_east) == 2
            monitor = next(m for m in kube.monitors if m.api.name == "east")
            with apiserver_down_for(worker_planes["east"], seconds=4.0):
                worker_planes["east"].restart_apiserver(grace=0.0)
            wait_for(lambda: monitor.returns >= 2, timeout=60, what="east to be live again")
            assert monitor.losses >= 1
            # east's copies of the evicted workloads were deleted before it was used again.
            for k in kubelets.values():
                k.hold = False
            wait_for(
                lambda: _finished(env.engine) >= count,
                timeout=180,
                interval=1.0,
                what=f"{count} jobs finished",
            )
        assert sampler.double == [], sampler.double[:5]
        assert _finished(env.engine) == count  # nothing lost, nothing finished twice
        holders: dict[str, list[str]] = {}
        for name, api in probes.items():
            for copy in api.copies():
                holders.setdefault(copy["metadata"]["name"], []).append(name)
        assert all(len(v) == 1 for v in holders.values()), holders
