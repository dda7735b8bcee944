"""Job created -> unsuspended through a real kube-apiserver: latency (p50/p99) and Jobs/s.

Why it exists: the issue asks how long a tenant's Job waits for queuemgr when
capacity is free, and how many Jobs a second the controller sustains, with
the client's QPS set deliberately (the API server is shared; a controller
that bursts is a bad neighbour). This starts the test control plane (etcd and
kube-apiserver; no controller-manager, so unsuspended Jobs create no pods and
only queuemgr's path is measured), an embedded Postgres, and ``queuemgr
serve``'s Service in-process with ``backend: kubernetes``; then creates Jobs
(labelled, ``suspend: true``, 1 GPU each, all fitting) at a fixed rate from a
separate client, and watches for each one's unsuspension.

    python bench/k8s_latency.py                      # 300 Jobs at 20/s, client QPS 50
    python bench/k8s_latency.py --jobs 500 --rate 50 --qps 100 --burst 200

Latency is measured from just before the create call returns to the watch
event that shows ``spec.suspend: false`` (both clocks are this process's).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client
from sqlalchemy import text

from queuemgr.controller.kube_section import KubernetesSettings
from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    ResourceFlavor,
)
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.jobapi import KindApi
from queuemgr.k8s.jobs import QUEUE_LABEL
from queuemgr.k8s.reflector import Change, Reflector
from queuemgr.service.app import Service
from queuemgr.service.settings import ServiceConfig
from queuemgr.store import config_objects as store_config
from queuemgr.store import migrate
from queuemgr.store.database import create_engine
from queuemgr.store.embedded import embedded_server
from tests.controlplane.build import ensure_built
from tests.controlplane.harness import add_gpu_node, start_control_plane

GPU = ResourceName("nvidia.com/gpu")
NS = "bench"


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: "default"}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.invalid/c:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def checked(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The parsed options, or exit 2 naming the first that is out of range."""
    args = parser.parse_args()
    if not 1 <= args.jobs <= 100_000:
        parser.error(f"--jobs: expected 1 to 100000, got {args.jobs}")
    if not 1 <= args.burst <= 100_000:
        parser.error(f"--burst: expected 1 to 100000, got {args.burst}")
    for name in ("rate", "qps", "status_qps", "timeout"):
        value = getattr(args, name, 1.0)
        if not (math.isfinite(value) and 0 < value <= 1e6):
            parser.error(f"--{name.replace('_', '-')}: expected a number above 0, got {value}")
    return args


PATCHES: list[float] = []  # seconds each of the controller's job patches took


def _timed_patch() -> None:
    """Time every job patch the controller sends (starts, suspends, status)."""
    original = KindApi.patch

    def patch(self: KindApi, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return original(self, *args, **kwargs)
        finally:
            PATCHES.append(time.monotonic() - started)

    KindApi.patch = patch  # type: ignore[method-assign]


def run(args: argparse.Namespace) -> None:
    _timed_patch()
    binaries = ensure_built()
    with tempfile.TemporaryDirectory(prefix="queuemgr-k8sbench-") as work:
        root = Path(work)
        with (
            embedded_server(root / "pg") as pg_url,
            start_control_plane(binaries, root / "cp", controllers=False) as plane,
        ):
            migrate.upgrade(pg_url)
            engine = create_engine(pg_url)
            nodes = (args.jobs + 7) // 8
            with plane.api_client() as admin:
                client.CoreV1Api(admin).create_namespace({"metadata": {"name": NS}})
                for i in range(nodes):
                    add_gpu_node(admin, f"n{i}", labels={"pool": "bench"})
            flavor = ResourceFlavor(name=FlavorName("h100"), node_labels={"pool": "bench"})
            with engine.begin() as conn:
                store_config.upsert_flavor(conn, flavor, actor="bench")
                store_config.upsert_cluster_queue(
                    conn,
                    ClusterQueue(
                        name=ClusterQueueName("all"),
                        flavors=(FlavorQuota(flavor=flavor.name, nominal={GPU: nodes * 8}),),
                    ),
                    actor="bench",
                )
                store_config.upsert_local_queue(
                    conn,
                    LocalQueue(namespace=NS, name="default", cluster_queue=ClusterQueueName("all")),
                    actor="bench",
                )
            config = ServiceConfig(
                database_url=pg_url,
                backend="kubernetes",
                http_port=0,
                kubernetes=KubernetesSettings(
                    kubeconfig=plane.kubeconfig(),
                    qps=args.qps,
                    burst=args.burst,
                    status_qps=min(args.status_qps, args.qps),
                    pods_ready=None,
                ),
            )
            service = Service(config)
            service.start()
            created: dict[str, float] = {}
            unsuspended: dict[str, float] = {}
            done = threading.Event()

            def seen(change: Change, obj: dict[str, Any]) -> None:
                name = obj["metadata"]["name"]
                if change is not Change.DELETED and not obj["spec"].get("suspend", False):
                    unsuspended.setdefault(name, time.monotonic())
                    if len(unsuspended) >= args.jobs:
                        done.set()

            with plane.api_client() as observer, plane.api_client() as creator:
                batch_o = client.BatchV1Api(observer)

                def lister(**kwargs: Any) -> Any:
                    return batch_o.list_namespaced_job(NS, **kwargs)

                watch = Reflector("bench-jobs", lister, seen)
                watch.start()
                watch.wait_synced(30)
                batch = client.BatchV1Api(creator)
                started = time.monotonic()
                for i in range(args.jobs):
                    due = started + i / args.rate
                    if (wait := due - time.monotonic()) > 0:
                        time.sleep(wait)
                    name = f"j{i:05d}"
                    batch.create_namespaced_job(NS, job(name))
                    created[name] = time.monotonic()
                    offset = time.time() - created[name]
                submitted = time.monotonic() - started
                ok = done.wait(args.timeout)
                finished = max(unsuspended.values(), default=started)
                watch.stop()
            with engine.connect() as conn:
                rows = conn.execute(
                    text("SELECT name, admitted_at FROM workloads WHERE admitted_at IS NOT NULL")
                )
                admitted = {r.name: r.admitted_at.timestamp() - offset for r in rows}
            limiter = service.kube.client.limiter if service.kube else None
            service.stop()
            engine.dispose()
    lat = [unsuspended[n] - created[n] for n in created if n in unsuspended]
    to_admit = [admitted[n] - created[n] for n in created if n in admitted]
    to_run = [unsuspended[n] - admitted[n] for n in admitted if n in unsuspended]
    print(f"Kubernetes {plane.version}; client qps {args.qps:g}, burst {args.burst}")
    print(
        f"jobs {args.jobs} offered at {args.rate:g}/s over {submitted:.1f} s; "
        f"unsuspended {len(lat)}{'' if ok else ' (timed out)'}"
    )
    if lat:
        print(
            f"created -> unsuspended: p50 {statistics.median(lat) * 1000:.0f} ms, "
            f"p99 {percentile(lat, 0.99) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms"
        )
        print(
            f"  created -> admitted (committed): p50 {statistics.median(to_admit) * 1000:.0f} ms,"
            f" p99 {percentile(to_admit, 0.99) * 1000:.0f} ms; admitted -> unsuspended: p50"
            f" {statistics.median(to_run) * 1000:.0f} ms,"
            f" p99 {percentile(to_run, 0.99) * 1000:.0f} ms"
        )
        print(
            f"sustained: {len(lat) / (finished - started):.1f} Jobs/s "
            f"(first create to last unsuspend)"
        )
    if limiter is not None:
        print(f"controller waited {limiter.waited:.1f} s in total for rate-limit tokens")
    if PATCHES:
        print(
            f"job patches: {len(PATCHES)}, median {statistics.median(PATCHES) * 1000:.0f} ms "
            f"(rate-limit wait included), {sum(PATCHES):.1f} s in total"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rate", type=float, default=20.0, help="Jobs created per second")
    parser.add_argument("--qps", type=float, default=50.0, help="the controller's client QPS")
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--status-qps", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    run(checked(parser))


if __name__ == "__main__":
    main()
