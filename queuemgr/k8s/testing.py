"""An in-memory :class:`~queuemgr.k8s.queue_directory.QueueDirectory`: a testing module.

Why it exists: the webhook's rules are tested as pure functions over dicts;
they need a directory that answers from a few core objects and can be made to
fail on demand. It lives beside the port so that the type checker keeps it in
step with the Protocol.

What must stay true: it answers exactly as the store-backed directory does for
the same objects (a node counts for every flavor whose labels it carries and
only while schedulable; node shapes are distinct); ``available = False``
makes every call raise :class:`~queuemgr.k8s.queue_directory.DirectoryUnavailable`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from queuemgr.core.directory import AdmittedView, ClusterQueueView, FlavorCapacity
from queuemgr.core.model import (
    Admission,
    ClusterQueue,
    LocalQueue,
    Node,
    ResourceFlavor,
    Workload,
)
from queuemgr.core.resources import Resources
from queuemgr.k8s.apiclient import ApiException
from queuemgr.k8s.provisioning import RequestObjects
from queuemgr.k8s.queue_directory import DirectoryUnavailable


class InMemoryDirectory:
    def __init__(
        self,
        *,
        flavors: Iterable[ResourceFlavor] = (),
        nodes: Iterable[Node] = (),
        cluster_queues: Iterable[ClusterQueue] = (),
        local_queues: Iterable[LocalQueue] = (),
        admitted: Iterable[tuple[Workload, Admission]] = (),
    ) -> None:
        self.flavors = {f.name: f for f in flavors}
        self.nodes = list(nodes)
        self.cluster_queues = {cq.name: cq for cq in cluster_queues}
        self.local_queues_ = {(lq.namespace, lq.name): lq for lq in local_queues}
        self.admitted_ = {(w.namespace, w.name): (w, a) for w, a in admitted}
        self.available = True
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if not self.available:
            raise DirectoryUnavailable("the in-memory directory is switched off")

    def local_queue(self, namespace: str, name: str) -> str | None:
        self._check()
        lq = self.local_queues_.get((namespace, name))
        return None if lq is None else lq.cluster_queue

    def local_queues(self, namespace: str) -> list[str]:
        self._check()
        return sorted(name for ns, name in self.local_queues_ if ns == namespace)

    def _shapes(self, flavor: ResourceFlavor | None) -> tuple[Resources, ...]:
        if flavor is None:
            return ()
        shapes: list[Resources] = []
        for node in self.nodes:
            if node.schedulable and flavor.selects(node.labels):
                shape = dict(node.allocatable)
                if shape not in shapes:
                    shapes.append(shape)
        return tuple(shapes)

    def cluster_queue(self, name: str) -> ClusterQueueView | None:
        self._check()
        cq = self.cluster_queues.get(name)  # type: ignore[call-overload]
        if cq is None:
            return None
        return ClusterQueueView(
            name=cq.name,
            namespaces=cq.namespaces,
            flavors=tuple(
                FlavorCapacity(
                    flavor=q.flavor,
                    nominal=dict(q.nominal),
                    node_shapes=self._shapes(self.flavors.get(q.flavor)),
                )
                for q in cq.flavors
            ),
        )

    def admitted(self, namespace: str, name: str) -> AdmittedView | None:
        self._check()
        found = self.admitted_.get((namespace, name))
        if found is None:
            return None
        workload, admission = found
        return AdmittedView(
            queue=workload.queue,
            cluster_queue=admission.cluster_queue,
            flavor=admission.flavor,
            pod_sets=workload.pod_sets,
        )


class InMemoryProvisioning:
    """The :class:`~queuemgr.k8s.provisioning.ProvisioningClient` over dicts, with the
    autoscaler's part (:meth:`set_condition`) for tests to play."""

    def __init__(self) -> None:
        self.requests_by_key: dict[tuple[str, str], dict[str, Any]] = {}
        self.pod_templates: dict[tuple[str, str], dict[str, Any]] = {}
        self.created = 0
        self.available = True

    def _check(self) -> None:
        if not self.available:
            raise ApiException(status=503, reason="unavailable")

    def create(self, objects: RequestObjects) -> None:
        self._check()
        for t in objects.pod_templates:
            key = (t["metadata"]["namespace"], t["metadata"]["name"])
            self.pod_templates.setdefault(key, copy.deepcopy(t))
        meta = objects.request["metadata"]
        key = (meta["namespace"], meta["name"])
        if key not in self.requests_by_key:
            self.requests_by_key[key] = copy.deepcopy(objects.request)
            self.created += 1

    def requests(self) -> list[dict[str, Any]]:
        self._check()
        return [copy.deepcopy(r) for r in self.requests_by_key.values()]

    def delete(self, namespace: str, name: str) -> None:
        self._check()
        obj = self.requests_by_key.pop((namespace, name), None) or {}
        for ps in (obj.get("spec") or {}).get("podSets") or []:
            self.pod_templates.pop((namespace, ps["podTemplateRef"]["name"]), None)

    def set_condition(
        self, namespace: str, name: str, kind: str, status: str = "True", message: str = ""
    ) -> None:
        obj = self.requests_by_key[(namespace, name)]
        conditions = [
            c for c in (obj.setdefault("status", {}).get("conditions") or []) if c["type"] != kind
        ]
        conditions.append({"type": kind, "status": status, "reason": kind, "message": message})
        obj["status"]["conditions"] = conditions
