"""What the controller knows of the cluster: jobs, their pods, nodes, namespaces, priorities.

Why it exists: the backend, the job sync and the readiness check all read
the same cluster state; one set of reflectors (one watch per kind) keeps it,
and listeners hear of every change. Reads are from memory, so a scheduling
cycle never waits on the API server to learn what runs.

What must stay true:

- jobs are watched only with the ``queuemgr.io/queue-name`` label (a job
  whose label is removed is reported deleted), pods only with the
  ``queuemgr.io/workload`` label the controller puts on the pod templates it
  starts, namespaces only with the managed-namespace selector (the empty
  selector manages every namespace and watches none);
- a workload is ``namespace/name`` of its job, whatever its kind;
- listeners run on the reflector threads: they must return quickly (hand
  the work to a queue), and they must not raise;
- :meth:`ClusterWatch.synced` is false until every reflector has listed
  once: before that, the cache's silence means nothing;
- a job kind whose CRD is not served at start (``later``) is looked for
  again every ``discovery_interval`` seconds and watched from the moment it
  is served, so a JobSet created after its CRD was installed is not left
  suspended by the webhook with nobody watching it; a kind once watched
  stays watched.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from queuemgr.k8s import dra as dra_api
from queuemgr.k8s.jobapi import KindApi
from queuemgr.k8s.jobframework import GenericJob
from queuemgr.k8s.reflector import Change, Obj, Reflector, key_of

WORKLOAD_LABEL = "queuemgr.io/workload"
log = logging.getLogger(__name__)


class Topic(enum.Enum):
    JOB = "job"
    POD = "pod"
    NODE = "node"
    NAMESPACE = "namespace"
    PRIORITY_CLASS = "priorityclass"
    CLAIM_TEMPLATE = "resourceclaimtemplate"
    RESOURCE_SLICE = "resourceslice"


Listener = Callable[[Topic, Change, Obj], None]


@dataclass(frozen=True, slots=True)
class JobRef:
    """A labelled job as last seen, with the API of its kind."""

    api: KindApi
    obj: Obj

    @property
    def job(self) -> GenericJob:
        return self.api.kind(self.obj)

    @property
    def workload_id(self) -> str:
        return key_of(self.obj)

    @property
    def version(self) -> str:
        return str(self.obj["metadata"]["resourceVersion"])


def pod_workload(pod: Obj) -> str | None:
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(WORKLOAD_LABEL)
    return f"{meta.get('namespace')}/{name}" if name else None


def pod_done(pod: Obj) -> bool:
    """Gone for scheduling purposes: finished, or being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp")
    )


def pod_ready(pod: Obj) -> bool:
    """Running with its Ready condition True, or already Succeeded (and not being deleted)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") == "Succeeded":
        return True
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


class ClusterWatch:
    def __init__(
        self,
        api_client: client.ApiClient,
        kinds: Sequence[KindApi],
        *,
        later: Sequence[KindApi] = (),
        discovery_interval: float = 30.0,
        managed_namespaces: str = "",
        watch_timeout: int = 300,
        dra: bool = False,
    ) -> None:
        core = client.CoreV1Api(api_client)
        self._listeners: list[Listener] = []
        self._lock = threading.Condition()
        self._pods: dict[str, dict[str, Obj]] = {}  # workload -> pod key -> pod
        self._watch_timeout = watch_timeout
        # Replaced whole, never changed in place: readers on other threads take one tuple.
        self._kinds: tuple[tuple[KindApi, Reflector], ...] = tuple(
            (api, self._job_reflector(api)) for api in kinds
        )
        self._later = list(later)
        self._discovery_interval = discovery_interval
        self._discovery: threading.Thread | None = None
        self._stopping = threading.Event()

        def on(topic: Topic) -> Callable[[Change, Obj], None]:
            return lambda change, obj: self._changed(topic, change, obj)

        def pods(**kwargs: Any) -> Any:
            return core.list_pod_for_all_namespaces(label_selector=WORKLOAD_LABEL, **kwargs)

        def namespaces(**kwargs: Any) -> Any:
            return core.list_namespace(label_selector=managed_namespaces, **kwargs)

        self._pod_reflector = Reflector("pods", pods, on(Topic.POD), watch_timeout=watch_timeout)
        self._nodes = Reflector(
            "nodes", core.list_node, on(Topic.NODE), watch_timeout=watch_timeout
        )
        # A job's priority is its PriorityClass's value, read when the job is submitted.
        self._priorities = Reflector(
            "priorityclasses",
            client.SchedulingV1Api(api_client).list_priority_class,
            on(Topic.PRIORITY_CLASS),
            watch_timeout=watch_timeout,
        )
        self._namespaces = (
            Reflector("namespaces", namespaces, on(Topic.NAMESPACE), watch_timeout=watch_timeout)
            if managed_namespaces.strip()
            else None
        )
        # DRA (only when device classes are mapped: older clusters serve no resource.k8s.io/v1).
        self._dra: tuple[Reflector, Reflector] | None = None
        if dra:
            custom = client.CustomObjectsApi(api_client)

            def resource(plural: str) -> Callable[..., Any]:
                return lambda **kwargs: custom.list_cluster_custom_object(
                    dra_api.GROUP, dra_api.VERSION, plural, **kwargs
                )

            self._dra = (
                Reflector(
                    dra_api.CLAIM_TEMPLATES,
                    resource(dra_api.CLAIM_TEMPLATES),
                    on(Topic.CLAIM_TEMPLATE),
                    watch_timeout=watch_timeout,
                ),
                Reflector(
                    dra_api.RESOURCE_SLICES,
                    resource(dra_api.RESOURCE_SLICES),
                    on(Topic.RESOURCE_SLICE),
                    watch_timeout=watch_timeout,
                ),
            )

    def _job_reflector(self, api: KindApi) -> Reflector:
        def changed(change: Change, obj: Obj) -> None:
            self._changed(Topic.JOB, change, obj)

        return Reflector(api.kind.PLURAL, api.lister(), changed, watch_timeout=self._watch_timeout)

    @property
    def kinds(self) -> list[KindApi]:
        """The job kinds watched now."""
        return [api for api, _ in self._kinds]

    @property
    def reflectors(self) -> list[Reflector]:
        extra = [] if self._namespaces is None else [self._namespaces]
        extra += list(self._dra or ())
        jobs = [r for _, r in self._kinds]
        return [*jobs, self._pod_reflector, self._nodes, self._priorities, *extra]

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _changed(self, topic: Topic, change: Change, obj: Obj) -> None:
        if topic is Topic.POD:
            wid = pod_workload(obj)
            if wid is not None:
                with self._lock:
                    pods = self._pods.setdefault(wid, {})
                    if change is Change.DELETED:
                        pods.pop(key_of(obj), None)
                        if not pods:
                            del self._pods[wid]
                    else:
                        pods[key_of(obj)] = obj
                    self._lock.notify_all()
        for listener in self._listeners:
            listener(topic, change, obj)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        for r in self.reflectors:
            r.start()
        if self._later:
            self._discovery = threading.Thread(
                target=self._discover, name="queuemgr-kind-discovery", daemon=True
            )
            self._discovery.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._discovery is not None:
            self._discovery.join()
        for r in self.reflectors:
            r.stop()

    def _discover(self) -> None:
        while self._later and not self._stopping.wait(self._discovery_interval):
            for api in list(self._later):
                try:
                    served = api.served()
                except Exception as exc:  # the API server may be away; ask again later
                    log.info("looking for %s: %s", api.name, exc)
                    continue
                if not served or self._stopping.is_set():
                    continue
                reflector = self._job_reflector(api)
                reflector.start()
                self._kinds = (*self._kinds, (api, reflector))
                self._later.remove(api)
                log.info("%s is served now; its jobs are watched", api.name)

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(r.wait_synced(max(0.0, deadline - time.monotonic())) for r in self.reflectors)

    # -- reads -----------------------------------------------------------------------
    def job(self, workload_id: str) -> JobRef | None:
        for api, reflector in self._kinds:
            obj = reflector.get(workload_id)
            if obj is not None:
                return JobRef(api, obj)
        return None

    def jobs(self) -> list[JobRef]:
        return [JobRef(api, obj) for api, reflector in self._kinds for obj in reflector.items()]

    def remember(self, ref: JobRef, obj: Obj) -> None:
        """A job as a write of ours returned it (newer than the watch has told yet)."""
        next(r for api, r in self._kinds if api is ref.api).remember(obj)

    def pods(self, workload_id: str) -> list[Obj]:
        with self._lock:
            return list(self._pods.get(workload_id, {}).values())

    def wait_pods(
        self, workload_id: str, done: Callable[[list[Obj]], bool], timeout: float
    ) -> bool:
        """Wait until ``done(pods of the workload)`` holds; False after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not done(list(self._pods.get(workload_id, {}).values())):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 1.0))
        return True

    def nodes(self) -> list[Obj]:
        return self._nodes.items()

    def node(self, name: str) -> Obj | None:
        return self._nodes.get(name)

    def priority_classes(self) -> list[Obj]:
        return self._priorities.items()

    def claim_template(self, namespace: str, name: str) -> Obj | None:
        """A ResourceClaimTemplate as last seen (None without DRA, or when there is none)."""
        return None if self._dra is None else self._dra[0].get(f"{namespace}/{name}")

    def resource_slices(self) -> list[Obj]:
        return [] if self._dra is None else self._dra[1].items()

    def managed(self, namespace: str) -> bool:
        return self._namespaces is None or self._namespaces.get(namespace) is not None
