"""What a tenant does with their own kubeconfig: submit, list, ask why, cancel.

Why it exists: in Kubernetes mode tenants need no database access at all.
Their jobs are Kubernetes objects, so the tenant commands talk to the API
server with the tenant's own credentials, and Kubernetes RBAC decides what
they may see and touch (a tenant bound to one namespace cannot list
another's jobs). The controller writes each job's queue status onto the job
(a ``QueuemgrPending``/``QueuemgrAdmitted`` condition, or annotations), and
this module reads it back.

What must stay true: a submitted job carries the ``queuemgr.io/queue-name``
label and is created ``suspend: true`` (the webhook would force it anyway);
every kind queuemgr manages goes through the same generic REST paths, and a
kind whose CRD is not installed is skipped, not an error; nothing here
caches: every command reads the server's current state.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, cast

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from queuemgr.k8s.jobframework import QUEUE_LABEL, GenericJob
from queuemgr.k8s.jobs import KINDS, job_for
from queuemgr.k8s.jobstatus import (
    ADMITTED_CONDITION,
    ETA_ANNOTATION,
    PENDING_CONDITION,
    POSITION_ANNOTATION,
    REASON_ANNOTATION,
)

Obj = dict[str, Any]


def build_job(
    *,
    name: str,
    namespace: str,
    queue: str,
    image: str,
    command: Sequence[str],
    pods: int,
    requests: Mapping[str, str],
    max_runtime: int | None = None,
) -> Obj:
    """A batch/v1 Job of ``pods`` parallel pods, labelled for ``queue`` and suspended."""
    container: Obj = {"name": "main", "image": image, "resources": {"requests": dict(requests)}}
    if requests:
        container["resources"]["limits"] = {
            r: q for r, q in requests.items() if r not in ("cpu", "memory")
        }  # extended resources (GPUs) must set limits equal to requests
    if command:
        container["command"] = list(command)
    spec: Obj = {
        "parallelism": pods,
        "completions": pods,
        "suspend": True,
        "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
    }
    if max_runtime is not None:
        spec["activeDeadlineSeconds"] = max_runtime
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": spec,
    }


def labelled(obj: Mapping[str, Any], queue: str | None) -> Obj:
    """``obj`` with the queue label (``queue``, or the one it has) and suspended."""
    out = copy.deepcopy(dict(obj))
    job = job_for(out)  # refuses kinds queuemgr does not manage, naming them
    name = queue or job.queue_name()
    if not name:
        raise ValueError(f"metadata.labels.{QUEUE_LABEL}: no queue; give -q QUEUE")
    out.setdefault("metadata", {}).setdefault("labels", {})[QUEUE_LABEL] = name
    node = out
    *parents, last = _kind(out).SUSPEND  # the field the controller flips to hold it
    for token in parents:
        node = node.setdefault(str(token), {})
    node[str(last)] = True
    return out


def _kind(obj: Mapping[str, Any]) -> type[GenericJob]:
    return type(job_for(obj))


class TenantJobs:
    """The tenant's view of queued jobs, through the API server and its RBAC."""

    def __init__(self, api_client: ApiClient) -> None:
        self._api = CustomObjectsApi(api_client)

    def create(self, obj: Obj) -> Obj:
        kind = _kind(obj)
        meta = obj["metadata"]
        created = self._api.create_namespaced_custom_object(
            kind.GROUP, kind.VERSION, meta["namespace"], kind.PLURAL, obj
        )
        return cast(Obj, created)

    def list(self, namespace: str | None) -> list[Obj]:
        """Every labelled job of every installed kind, in ``namespace`` or all of them."""
        out: list[Obj] = []
        refused: list[ApiException] = []
        for k in KINDS:
            try:
                if namespace is None:
                    found = self._api.list_cluster_custom_object(
                        k.GROUP, k.VERSION, k.PLURAL, label_selector=QUEUE_LABEL
                    )
                else:
                    found = self._api.list_namespaced_custom_object(
                        k.GROUP, k.VERSION, namespace, k.PLURAL, label_selector=QUEUE_LABEL
                    )
            except ApiException as exc:
                if exc.status == 404:  # the kind's CRD is not installed
                    continue
                if exc.status == 403:  # RBAC may grant Jobs but not, say, JobSets
                    refused.append(exc)
                    continue
                raise
            for item in cast(Obj, found).get("items") or ():
                item.setdefault("apiVersion", f"{k.GROUP}/{k.VERSION}".removeprefix("/"))
                item.setdefault("kind", k.KIND)
                out.append(item)
        if refused and len(refused) == len(KINDS):
            raise refused[0]  # not allowed to see any kind: say so, do not show nothing
        out.sort(key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
        return out

    def get(self, namespace: str, name: str) -> Obj | None:
        for k in KINDS:
            try:
                obj = cast(
                    Obj,
                    self._api.get_namespaced_custom_object(
                        k.GROUP, k.VERSION, namespace, k.PLURAL, name
                    ),
                )
            except ApiException as exc:
                if exc.status in (403, 404) and k is not KINDS[0]:
                    continue  # a kind not installed, or not granted: not this one
                if exc.status == 404:
                    continue
                raise
            if QUEUE_LABEL in (obj.get("metadata", {}).get("labels") or {}):
                return obj
        return None

    def delete(self, obj: Mapping[str, Any]) -> None:
        k = _kind(obj)
        meta = obj["metadata"]
        self._api.delete_namespaced_custom_object(
            k.GROUP,
            k.VERSION,
            meta["namespace"],
            k.PLURAL,
            meta["name"],
            propagation_policy="Background",
        )


def status(obj: Mapping[str, Any]) -> Obj:
    """The job's queue status as the controller wrote it, in the CLI's document shape."""
    job = job_for(obj)
    meta = obj.get("metadata") or {}
    notes = meta.get("annotations") or {}
    conditions = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or ()}
    done = job.finished()
    if done is not None:
        state, reason = "Finished", "Succeeded" if done.succeeded else "Failed"
        message = done.message or done.reason
    elif not job.is_suspended():
        state = "Admitted"
        c = conditions.get(ADMITTED_CONDITION) or {}
        reason, message = c.get("reason") or "Admitted", c.get("message") or ""
    else:
        state = "Pending"
        c = conditions.get(PENDING_CONDITION) or {}
        # The annotation is "Code: message" (QueueStatus.summary); a kind whose status
        # keeps no conditions (RayJob) has only the annotation.
        code, _, said = (notes.get(REASON_ANNOTATION) or "").partition(": ")
        reason = c.get("reason") or code or "Created"
        message = c.get("message") or said
    # "2 in LocalQueue default, 5 in ClusterQueue team-a": the first is the tenant's own.
    position = (notes.get(POSITION_ANNOTATION) or "").split(" ", 1)[0]
    gpus = sum(
        ps.count * v for ps in job.pod_sets() for r, v in ps.requests.items() if r.endswith("gpu")
    )
    return {
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "kind": obj.get("kind"),
        "local_queue": job.queue_name(),
        "state": state,
        "reason": reason,
        "message": message,
        "position": int(position) if position and position.isdigit() else None,
        "eta": notes.get(ETA_ANNOTATION) if state == "Pending" else None,
        "gpus": gpus,
        "created_at": meta.get("creationTimestamp"),
    }
