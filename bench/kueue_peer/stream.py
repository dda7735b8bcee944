"""Kueue's ``configs/baseline`` workload stream, as the labelled Jobs a tenant submits.

Why it exists: ``run_queuemgr.py`` races queuemgr against Kueue's own
scheduler benchmark (``run_kueue.py``). This module plays the generator of
Kueue's ``runner``: it reads Kueue's ``generator.yaml`` (cohorts, queues,
workload sets) and creates the Jobs at its intervals; ``runner.py`` plays
its recorder and its controller.

What must stay true:

- names and structure follow Kueue's generator (``runner/generator``):
  cohort ``<class>-<i>``, ClusterQueue ``<class>-<set>-<i>-<cohort>``, a
  namespace and a LocalQueue of the ClusterQueue's name, workload
  ``<class>-<set>-<n>-<template>``; each workload set is one stream that
  sleeps its interval *before* each create (so it drifts by the create's
  latency, as Kueue's does), all streams starting together;
- the Jobs are what a tenant submits: ``batch/v1``, ``suspend: true``, the
  queue label, one pod with a cpu request, the priority as a PriorityClass
  named in the pod template;
- a set's count times ``--scale`` is rounded, and at least 1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queuemgr.core.resources import parse_quantity
from queuemgr.k8s.jobs import QUEUE_LABEL

CLASS_LABEL = "kueue-peer.queuemgr.io/class"
RUNTIME_LABEL = "kueue-peer.queuemgr.io/runtime-ms"
FLAVOR = "rf"  # Kueue's generator's default ResourceFlavor name


def priority_class(value: int) -> str:
    return f"baseline-{value}"


@dataclass(frozen=True)
class Template:
    cls: str
    runtime_ms: int
    priority: int
    cpu: str


@dataclass(frozen=True)
class WorkloadSet:
    namespace: str
    queue: str
    index: int
    count: int
    interval_ms: int
    templates: tuple[Template, ...]

    def jobs(self) -> list[tuple[str, Template]]:
        return [
            (f"{t.cls}-{self.index}-{n}-{i}", t)
            for n in range(self.count)
            for i, t in enumerate(self.templates)
        ]


@dataclass(frozen=True)
class Queue:
    name: str
    cohort: str
    nominal: str
    borrowing_limit: str
    reclaim_within_cohort: str
    within_cluster_queue: str


@dataclass(frozen=True)
class Baseline:
    queues: tuple[Queue, ...]
    sets: tuple[WorkloadSet, ...]

    @property
    def total(self) -> int:
        return sum(len(s.jobs()) for s in self.sets)

    def nominal_cpu(self) -> float:
        return sum(parse_quantity(q.nominal, resource="cpu", field="") for q in self.queues) / 1000

    def cpu_seconds(self) -> float:
        return sum(
            parse_quantity(t.cpu, resource="cpu", field="") * t.runtime_ms / 1e6
            for s in self.sets
            for _, t in s.jobs()
        )

    def queues_document(self) -> dict[str, Any]:
        """The ClusterQueues as ``queuemgr apply`` takes them (quota only, no nodes)."""
        return {
            "flavors": [{"name": FLAVOR}],
            "cohorts": [{"name": c} for c in dict.fromkeys(q.cohort for q in self.queues)],
            "cluster_queues": [
                {
                    "name": q.name,
                    "cohort": q.cohort,
                    "resources": [
                        {
                            "flavor": FLAVOR,
                            "nominal": {"cpu": q.nominal},
                            "borrowing_limit": {"cpu": q.borrowing_limit},
                        }
                    ],
                    "preemption": {
                        "reclaim_within_cohort": q.reclaim_within_cohort,
                        "within_cluster_queue": q.within_cluster_queue,
                    },
                }
                for q in self.queues
            ],
            "local_queues": [
                {"namespace": q.name, "name": q.name, "cluster_queue": q.name} for q in self.queues
            ],
        }

    def priorities(self) -> set[int]:
        return {t.priority for s in self.sets for t in s.templates}


def load_baseline(path: Path, scale: float = 1.0) -> Baseline:
    """Kueue's generator config; each workload set's count times ``scale`` (at least 1)."""
    raw = yaml.safe_load(path.read_text()) or {}
    if raw.get("topology"):
        raise ValueError(f"{path}: a TAS topology is not replayed here")
    queues: list[Queue] = []
    sets: list[WorkloadSet] = []
    for c_set in raw.get("cohorts") or ():
        for c in range(int(c_set["count"])):
            cohort = f"{c_set['className']}-{c}"
            for qs_index, q_set in enumerate(c_set.get("queuesSets") or ()):
                for q in range(int(q_set["count"])):
                    name = f"{q_set['className']}-{qs_index}-{q}-{cohort}"
                    queues.append(
                        Queue(
                            name=name,
                            cohort=cohort,
                            nominal=str(q_set["nominalQuota"]),
                            borrowing_limit=str(q_set["borrowingLimit"]),
                            reclaim_within_cohort=q_set.get("reclaimWithinCohort") or "Never",
                            within_cluster_queue=q_set.get("withinClusterQueue") or "Never",
                        )
                    )
                    for index, w_set in enumerate(q_set.get("workloadsSets") or ()):
                        templates = tuple(
                            Template(
                                cls=t["className"],
                                runtime_ms=int(t["runtimeMs"]),
                                priority=int(t["priority"]),
                                cpu=str(t["request"]),
                            )
                            for t in w_set["workloads"]
                        )
                        if any(t.get("podCount", 1) != 1 for t in w_set["workloads"]):
                            raise ValueError(f"{path}: only one pod per workload is replayed")
                        count = max(1, round(int(w_set["count"]) * scale))
                        sets.append(
                            WorkloadSet(
                                name,
                                name,
                                index,
                                count,
                                int(w_set["creationIntervalMs"]),
                                templates,
                            )
                        )
    if not queues or not sets:
        raise ValueError(f"{path}: no queues or no workloads")
    return Baseline(tuple(queues), tuple(sets))


def job_manifest(name: str, queue: str, t: Template) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {QUEUE_LABEL: queue, CLASS_LABEL: t.cls, RUNTIME_LABEL: str(t.runtime_ms)},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": priority_class(t.priority),
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/sleep:1",
                            "resources": {"requests": {"cpu": t.cpu}},
                        }
                    ],
                }
            },
        },
    }


def drain(response: Any) -> None:
    """Read a raw (``_preload_content=False``) response and give its connection back."""
    response.read()
    response.release_conn()


def api_client(url: str, ca_file: str, token: str, pool: int) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    configuration.ssl_ca_cert = ca_file
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    configuration.connection_pool_maxsize = pool
    return client.ApiClient(configuration)


def generate(api: Mapping[str, str], sets: list[WorkloadSet], go: Any, out: Any) -> None:
    """In a child process: once ``go`` is set, run every set as Kueue does; report to ``out``."""
    batch = client.BatchV1Api(api_client(api["url"], api["ca"], api["token"], len(sets) + 1))
    errors: list[str] = []
    created = [0]
    lock = threading.Lock()

    def stream(w_set: WorkloadSet) -> None:
        for name, template in w_set.jobs():
            time.sleep(w_set.interval_ms / 1000)
            body = job_manifest(name, w_set.queue, template)
            try:
                drain(batch.create_namespaced_job(w_set.namespace, body, _preload_content=False))
            except (ApiException, OSError) as error:
                with lock:
                    errors.append(f"create {w_set.namespace}/{name}: {error}")
                return  # Kueue's generator stops too (and fails the run)
            with lock:
                created[0] += 1

    threads = [threading.Thread(target=stream, args=(s,), daemon=True) for s in sets]
    out.put(("ready", None))
    go.wait()
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.put(
        (
            "done",
            {"created": created[0], "errors": errors[:5], "seconds": time.monotonic() - started},
        )
    )
