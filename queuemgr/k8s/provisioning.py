"""ProvisioningRequests (``autoscaling.x-k8s.io/v1``) and the PodTemplates they name.

Why it exists: the ``provisioning-request`` admission check asks the cluster
autoscaler for room for a reserved gang before its job starts (Kueue's
ProvisioningRequest admission check). A ProvisioningRequest names, per pod set,
a PodTemplate object in its namespace and a count, and a class
(``check-capacity.autoscaling.x-k8s.io``, ``best-effort-atomic-scale-up...``);
the autoscaler answers with conditions: ``Provisioned``, ``Failed``,
``BookingExpired``, ``CapacityRevoked``. This module builds those objects from
a job and its flavor, and reads the conditions back; the controller's check
(``controller/reservation_checks.py``, ``controller/provisioning.py``) decides what
they mean for the workload.

What must stay true: the objects are labelled with the check and the job
(``queuemgr.io/admission-check``, ``queuemgr.io/workload``) and owned by the
job, so they are listed with one selector and garbage-collected with the job;
the pod templates are the job's own with the flavor's node labels and
tolerations added (the nodes the autoscaler adds must be nodes the gang may
run on); names are valid object names whatever the job's name.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queuemgr.core.model import ResourceFlavor
from queuemgr.k8s.cluster import WORKLOAD_LABEL
from queuemgr.k8s.jobframework import GenericJob
from queuemgr.k8s.reflector import Obj

GROUP = "autoscaling.x-k8s.io"
VERSION = "v1"
PLURAL = "provisioningrequests"
KIND = "ProvisioningRequest"
CHECK_LABEL = "queuemgr.io/admission-check"
MAX_NAME = 253

PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"


def object_name(*parts: str) -> str:
    """``a-b-c``, shortened with a hash of the whole when longer than an object name may be."""
    name = "-".join(parts)
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME - 11].rstrip('-.')}-{digest}"


def request_name(job_name: str, check: str, attempt: int) -> str:
    return object_name(job_name, check, str(attempt))


def _owner(job: GenericJob) -> dict[str, Any]:
    meta = job.obj.get("metadata") or {}
    return {
        "apiVersion": job.obj.get("apiVersion"),
        "kind": job.obj.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": False,
        "blockOwnerDeletion": False,
    }


def _metadata(job: GenericJob, name: str, check: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": job.namespace,
        "labels": {CHECK_LABEL: check, WORKLOAD_LABEL: job.name},
    }
    if (job.obj.get("metadata") or {}).get("uid"):
        meta["ownerReferences"] = [_owner(job)]
    return meta


def _pinned(spec: Mapping[str, Any], flavor: ResourceFlavor | None) -> dict[str, Any]:
    """A pod template's spec with the flavor's node labels and tolerations added."""
    out = copy.deepcopy(dict(spec))
    pod = dict(out.get("spec") or {})
    if flavor is not None:
        if flavor.node_labels:
            pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **flavor.node_labels}
        tolerations = list(pod.get("tolerations") or [])
        for t in flavor.tolerations:
            entry = {
                k: v
                for k, v in {
                    "key": t.key,
                    "operator": t.operator,
                    "value": t.value,
                    "effect": None if t.effect is None else t.effect.value,
                }.items()
                if v
            }
            if entry not in tolerations:
                tolerations.append(entry)
        if tolerations:
            pod["tolerations"] = tolerations
    out["spec"] = pod
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestObjects:
    """A ProvisioningRequest and the PodTemplates it names, ready to create."""

    request: dict[str, Any]
    pod_templates: tuple[dict[str, Any], ...]


def request_objects(
    job: GenericJob,
    flavor: ResourceFlavor | None,
    *,
    check: str,
    attempt: int,
    provisioning_class: str,
    parameters: Mapping[str, str],
) -> RequestObjects:
    """The request for ``job``'s gang: one PodTemplate per pod set, with its count."""
    name = request_name(job.name, check, attempt)
    templates: list[dict[str, Any]] = []
    pod_sets: list[dict[str, Any]] = []
    for t in job.templates():
        spec = job.template(t)
        template_name = object_name("ppt", name, t.name)
        templates.append(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": _metadata(job, template_name, check),
                "template": _pinned(spec, flavor),
            }
        )
        pod_sets.append({"podTemplateRef": {"name": template_name}, "count": t.count})
    request: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": _metadata(job, name, check),
        "spec": {"provisioningClassName": provisioning_class, "podSets": pod_sets},
    }
    if parameters:
        request["spec"]["parameters"] = dict(parameters)
    return RequestObjects(request=request, pod_templates=tuple(templates))


@dataclass(frozen=True, kw_only=True, slots=True)
class Condition:
    type: str
    status: str  # "True", "False", "Unknown"
    reason: str
    message: str

    @property
    def true(self) -> bool:
        return self.status == "True"

    @property
    def text(self) -> str:
        """``Provisioned=False: <message>`` (the reason when there is no message)."""
        return f"{self.type}={self.status}: {self.message or self.reason}".rstrip(": ")


def conditions(obj: Mapping[str, Any]) -> dict[str, Condition]:
    """A request's conditions, by type."""
    out: dict[str, Condition] = {}
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and isinstance(c.get("type"), str):
            out[c["type"]] = Condition(
                type=c["type"],
                status=str(c.get("status") or "Unknown"),
                reason=str(c.get("reason") or ""),
                message=str(c.get("message") or ""),
            )
    return out


class ProvisioningClient(Protocol):
    def create(self, objects: RequestObjects) -> None: ...
    def requests(self) -> list[Obj]: ...
    def delete(self, namespace: str, name: str) -> None: ...


class ProvisioningApi:
    """The few calls the check makes: create, list and delete requests and templates."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)

    def create(self, objects: RequestObjects) -> None:
        """Create the templates, then the request; those already there are kept."""
        for template in objects.pod_templates:
            body: Any = template  # the client sends a dict as it is
            try:
                self._core.create_namespaced_pod_template(
                    body["metadata"]["namespace"], body, _preload_content=False
                )
            except ApiException as error:
                if error.status != 409:
                    raise
        request = objects.request
        try:
            self._custom.create_namespaced_custom_object(
                GROUP, VERSION, request["metadata"]["namespace"], PLURAL, request
            )
        except ApiException as error:
            if error.status != 409:
                raise

    def requests(self) -> list[Obj]:
        """Every request a check of queuemgr made, in every namespace."""
        found: Any = self._custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, label_selector=CHECK_LABEL
        )
        return list(found.get("items") or [])

    def delete(self, namespace: str, name: str) -> None:
        """Delete a request and the templates it names (each gone already is fine)."""
        obj: Any = {}
        try:
            obj = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            self._custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as error:
            if error.status != 404:
                raise
        for ps in (obj.get("spec") or {}).get("podSets") or []:
            template = (ps.get("podTemplateRef") or {}).get("name")
            if not template:
                continue
            try:
                self._core.delete_namespaced_pod_template(
                    template, namespace, _preload_content=False
                )
            except ApiException as error:
                if error.status != 404:
                    raise
