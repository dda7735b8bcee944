"""A KubeRay RayJob (``ray.io/v1``) as a gang: the cluster it creates, plus its submitter.

Why it exists: a RayJob creates a RayCluster, runs an entrypoint on it and
(usually) tears it down; queuemgr holds the RayJob suspended until its whole
cluster fits, as Kueue does.

What must stay true:

- the pod sets are those of ``spec.rayClusterSpec``, read by
  :func:`~queuemgr.k8s.kinds.raycluster.cluster_templates` (``head``, then
  one per worker group);
- in ``K8sJobMode`` (the default submission mode) KubeRay runs one submitter
  pod, pod set ``submitter``: ``spec.submitterPodTemplate``, or KubeRay's
  default (500m CPU, 200Mi memory requested), which queuemgr charges for but
  does not pin to the flavor's nodes, since the object has no template to
  write into; in ``SidecarMode`` the submitter is a container in the head pod,
  charged with the head; ``HTTPMode`` and ``InteractiveMode`` have none;
- a RayJob that runs on an existing cluster (``spec.clusterSelector``) has no
  pods of its own to queue, and is refused;
- it is suspended through ``spec.suspend`` (KubeRay deletes the cluster);
- it finishes when ``status.jobDeploymentStatus`` is ``Complete`` (succeeded
  when ``status.jobStatus`` is ``SUCCEEDED``) or ``Failed``/``ValidationFailed``;
- its time limit is ``spec.activeDeadlineSeconds``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from queuemgr.core.model import PodSet
from queuemgr.core.resources import add
from queuemgr.k8s import manifest as m
from queuemgr.k8s.dra import DeviceCharger
from queuemgr.k8s.jobframework import GenericJob, Template
from queuemgr.k8s.kinds.raycluster import cluster_templates
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.placement import Finished
from queuemgr.k8s.podspec import container_requests

# KubeRay's default submitter container requests (its GetDefaultSubmitterContainer).
SUBMITTER_REQUESTS = {"cpu": "500m", "memory": "200Mi"}
DEFAULT_SUBMITTER: dict[str, Any] = {
    "spec": {
        "containers": [{"name": "ray-job-submitter", "resources": {"requests": SUBMITTER_REQUESTS}}]
    }
}
MODES = ("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode")


class RayJob(GenericJob):
    GROUP = "ray.io"
    VERSION = "v1"
    KIND = "RayJob"
    PLURAL = "rayjobs"
    SUSPEND = ("spec", "suspend")
    SUCCEEDED = ""  # terminal states are in status.jobDeploymentStatus, not conditions
    FAILED = ""

    def kind_templates(self) -> list[Template]:
        spec = m.required_mapping(self.obj, "spec", "")
        if m.string_map(spec, "clusterSelector", "spec"):
            raise ManifestError(
                "spec.clusterSelector",
                dict(m.string_map(spec, "clusterSelector", "spec")),
                "queuemgr queues a RayJob that creates its own cluster (spec.rayClusterSpec);"
                " one that runs on an existing cluster has nothing to admit:",
            )
        cluster = m.required_mapping(spec, "rayClusterSpec", "spec")
        out = cluster_templates(cluster, ("spec", "rayClusterSpec"))
        mode = self._mode(spec)
        if mode == "K8sJobMode":
            out.append(
                Template(
                    name="submitter",
                    count=1,
                    tokens=("spec", "submitterPodTemplate"),
                    default=DEFAULT_SUBMITTER,
                )
            )
        return out

    def pod_sets(self, devices: DeviceCharger | None = None) -> tuple[PodSet, ...]:
        sets = super().pod_sets(devices)
        if self._mode(m.required_mapping(self.obj, "spec", "")) != "SidecarMode":
            return sets
        container = DEFAULT_SUBMITTER["spec"]["containers"][0]
        extra = container_requests(container, "submitter")
        return tuple(
            dataclasses.replace(ps, requests=add(ps.requests, extra)) if ps.name == "head" else ps
            for ps in sets
        )

    def max_runtime(self) -> float | None:
        spec = m.mapping(self.obj, "spec", "")
        seconds = m.optional_integer(spec, "activeDeadlineSeconds", "spec", minimum=1)
        return None if seconds is None else float(seconds)

    def finished(self) -> Finished | None:
        status = m.mapping(self.obj, "status", "")
        deployment = m.string(status, "jobDeploymentStatus", "status")
        job_status = m.string(status, "jobStatus", "status")
        message = m.string(status, "message", "status")
        if deployment == "Complete":
            succeeded = job_status == "SUCCEEDED"
            return Finished(succeeded=succeeded, reason=job_status or deployment, message=message)
        if deployment in ("Failed", "ValidationFailed"):
            reason = m.string(status, "reason", "status") or deployment
            return Finished(succeeded=False, reason=reason, message=message)
        return None

    @staticmethod
    def _mode(spec: Any) -> str:
        mode = m.string(spec, "submissionMode", "spec") or "K8sJobMode"
        if mode not in MODES:
            raise ManifestError(
                "spec.submissionMode", mode, f"expected one of {', '.join(MODES)}, got"
            )
        return mode
