"""Multi-cluster dispatch latency: manager admission -> the worker's Job unsuspended (p50/p99).

Why it exists: the multi-cluster issue asks how long an admitted Job takes to
be running on its worker cluster, at a set rate of Jobs. This starts three
test control planes (etcd and kube-apiserver each, no controller-manager: the
manager's Jobs stay suspended, the workers' copies create no pods, so only
queuemgr's path is measured), an embedded Postgres, and ``queuemgr serve``'s
Service in-process as the manager, with the two others as
``kubernetes.worker_clusters``; then creates Jobs (1 GPU each, all fitting)
on the manager at a fixed rate and watches both workers for the copies.

    python bench/multicluster_latency.py                       # 300 Jobs at 20/s, first-fit
    python bench/multicluster_latency.py --jobs 500 --rate 50 --dispatch most-free

Latency is from the admission's time (the ``admittedAt`` the copy's placement
annotation carries, the manager's clock) to the watch event on the worker that
shows the copy, created unsuspended (this process's clock: the same machine).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k8s_latency import checked, job, percentile
from kubernetes import client

from queuemgr.controller.kube_section import KubernetesSettings, WorkerClusterSettings
from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    FlavorName,
    FlavorQuota,
    LocalQueue,
    ResourceFlavor,
)
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.jobframework import PLACEMENT_ANNOTATION
from queuemgr.k8s.placement import recorded_admission
from queuemgr.k8s.reflector import Change, Reflector
from queuemgr.k8s.remote import COPY_LABEL
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
WORKERS = ("east", "west")


def run(args: argparse.Namespace) -> None:
    binaries = ensure_built()
    seen: dict[str, tuple[str, float, float | None]] = {}  # name -> worker, seen, admitted
    done = threading.Event()
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="queuemgr-mcbench-") as work, ExitStack() as stack:
        root = Path(work)
        pg_url = stack.enter_context(embedded_server(root / "pg"))
        manager = stack.enter_context(
            start_control_plane(binaries, root / "manager", controllers=False)
        )
        workers = {
            n: stack.enter_context(start_control_plane(binaries, root / n, controllers=False))
            for n in WORKERS
        }
        migrate.upgrade(pg_url)
        engine = create_engine(pg_url)
        per_worker = (args.jobs + 15) // 16  # nodes of 8 GPUs: room for every Job twice over
        for plane in workers.values():
            with plane.api_client() as admin:
                for i in range(per_worker):
                    add_gpu_node(admin, f"n{i}", labels={"pool": "bench"})
        with manager.api_client() as admin:
            client.CoreV1Api(admin).create_namespace({"metadata": {"name": NS}})
        flavor = ResourceFlavor(name=FlavorName("h100"), node_labels={"pool": "bench"})
        with engine.begin() as conn:
            store_config.upsert_flavor(conn, flavor, actor="bench")
            store_config.upsert_cluster_queue(
                conn,
                ClusterQueue(
                    name=ClusterQueueName("all"),
                    flavors=(FlavorQuota(flavor=flavor.name, nominal={GPU: args.jobs}),),
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
                kubeconfig=manager.kubeconfig(),
                qps=args.qps,
                burst=args.burst,
                status_qps=min(5.0, args.qps),
                pods_ready=None,
                worker_clusters=tuple(
                    WorkerClusterSettings(name=n, kubeconfig=p.kubeconfig())
                    for n, p in workers.items()
                ),
                dispatch=args.dispatch,
                worker_poll_interval=1.0,
            ),
        )
        service = Service(config)
        service.start()
        stack.callback(service.stop)

        def watcher(name: str) -> Reflector:
            api = stack.enter_context(workers[name].api_client())
            batch = client.BatchV1Api(api)

            def lister(**kwargs: Any) -> Any:
                return batch.list_job_for_all_namespaces(label_selector=COPY_LABEL, **kwargs)

            def changed(change: Change, obj: dict[str, Any]) -> None:
                if change is Change.DELETED or obj["spec"].get("suspend", False):
                    return
                note = (obj["metadata"].get("annotations") or {}).get(PLACEMENT_ANNOTATION)
                with lock:
                    seen.setdefault(
                        obj["metadata"]["name"], (name, time.time(), recorded_admission(note))
                    )
                    if len(seen) >= args.jobs:
                        done.set()

            reflector = Reflector(f"bench-{name}", lister, changed)
            reflector.start()
            stack.callback(reflector.stop)
            reflector.wait_synced(30)
            return reflector

        for name in WORKERS:
            watcher(name)
        with manager.api_client() as creator:
            batch = client.BatchV1Api(creator)
            started = time.monotonic()
            for i in range(args.jobs):
                due = started + i / args.rate
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                batch.create_namespaced_job(NS, job(f"j{i:05d}"))
            submitted = time.monotonic() - started
            ok = done.wait(args.timeout)
        dispatch = service.kube.dispatch if service.kube else None
        creates = list(dispatch.dispatch_seconds) if dispatch else []
        version = manager.version
    with lock:
        lat = [at - admitted for _, at, admitted in seen.values() if admitted is not None]
        spread = {n: sum(1 for w, _, _ in seen.values() if w == n) for n in WORKERS}
    print(f"Kubernetes {version}; manager + {len(WORKERS)} workers; dispatch {args.dispatch}")
    print(
        f"jobs {args.jobs} offered at {args.rate:g}/s over {submitted:.1f} s; copies seen"
        f" {len(seen)}{'' if ok else ' (timed out)'}; per worker {spread}"
    )
    if lat:
        print(
            f"admitted -> unsuspended on the worker: p50 {statistics.median(lat) * 1000:.0f} ms,"
            f" p99 {percentile(lat, 0.99) * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms"
        )
    if creates:
        print(
            f"  of which the start (copy built and created): p50"
            f" {statistics.median(creates) * 1000:.0f} ms,"
            f" p99 {percentile(creates, 0.99) * 1000:.0f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rate", type=float, default=20.0, help="Jobs created per second")
    parser.add_argument("--dispatch", choices=("first-fit", "most-free"), default="first-fit")
    parser.add_argument("--qps", type=float, default=50.0, help="the manager's client QPS")
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=300.0)
    run(checked(parser))


if __name__ == "__main__":
    main()
