"""A KubeRay RayCluster (``ray.io/v1``) as a gang: the head plus one pod set per worker group.

Why it exists: Ray is how many ML teams run sweeps and batch inference. A
RayCluster holds its pods in a head group and a list of worker groups; this
module says where they are, and :mod:`~queuemgr.k8s.kinds.rayjob` reads a
RayJob's cluster spec with the same code.

What must stay true (the gang, as Kueue reads it):

- pod set ``head`` is one pod, from ``spec.headGroupSpec.template``;
- each ``spec.workerGroupSpecs[i]`` is a pod set named after its
  ``groupName`` (unique, not ``head`` or ``submitter``) of the workers KubeRay
  would run, ``replicas`` held within ``minReplicas`` and ``maxReplicas``,
  times ``numOfHosts``; a group with no workers (or ``suspend``) adds none;
- a ``minReplicas`` of at least 1, below the workers asked for, allows partial
  admission down to that many workers, only when exactly one worker group asks
  for it and runs one host per replica: the core shrinks one pod set per gang,
  and a multi-host replica is all or nothing. Otherwise every group is
  admitted whole (the CRD defaults ``minReplicas`` to 0: no partial admission);
- a cluster that autoscales itself (``enableInTreeAutoscaling``) is refused:
  its size is not the one quota was charged for;
- a RayCluster never finishes: it holds its quota until it is deleted;
- it is suspended through ``spec.suspend`` (KubeRay deletes its pods).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from queuemgr.k8s import manifest as m
from queuemgr.k8s.jobframework import GenericJob, Template
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.patch import Token
from queuemgr.k8s.placement import Finished

RESERVED = ("head", "submitter")


def cluster_templates(cluster: Mapping[str, Any], at: tuple[Token, ...]) -> list[Template]:
    """The pod sets of a RayClusterSpec found at ``at`` (``spec``, or a RayJob's
    ``spec.rayClusterSpec``)."""
    path = ".".join(str(t) for t in at)
    if m.boolean(cluster, "enableInTreeAutoscaling", path, default=False):
        raise ManifestError(
            f"{path}.enableInTreeAutoscaling",
            True,
            "queuemgr admits a Ray cluster at the size it asks for; it cannot autoscale:",
        )
    head = m.required_mapping(cluster, "headGroupSpec", path)
    m.required_mapping(head, "template", f"{path}.headGroupSpec")
    out = [Template(name="head", count=1, tokens=(*at, "headGroupSpec", "template"))]
    groups = m.sequence(cluster, "workerGroupSpecs", path)
    partial: list[tuple[int, int]] = []  # (pod set index, minReplicas)
    seen: set[str] = set()
    for i, group in enumerate(groups):
        gpath = f"{path}.workerGroupSpecs[{i}]"
        if not isinstance(group, Mapping):
            raise ManifestError(gpath, group, "expected an object, got")
        name = m.string(group, "groupName", gpath)
        if not name or name in seen or name in RESERVED:
            raise ManifestError(
                f"{gpath}.groupName", name, "expected a unique name, not head or submitter; got"
            )
        seen.add(name)
        m.required_mapping(group, "template", gpath)
        if m.boolean(group, "suspend", gpath, default=False):
            continue  # a suspended group runs no pods
        replicas = desired_replicas(group, gpath)
        hosts = m.integer(group, "numOfHosts", gpath, default=1, minimum=1)
        if replicas == 0:
            continue
        minimum = m.optional_integer(group, "minReplicas", gpath, minimum=0) or 0
        if 1 <= minimum < replicas and hosts == 1:
            partial.append((len(out), minimum))
        out.append(
            Template(
                name=name,
                count=replicas * hosts,
                tokens=(*at, "workerGroupSpecs", i, "template"),
                count_field=(*at, "workerGroupSpecs", i, "replicas"),
            )
        )
    if len(partial) == 1:
        k, minimum = partial[0]
        out[k] = dataclasses.replace(out[k], min_count=minimum)
    return out


def desired_replicas(group: Mapping[str, Any], path: str) -> int:
    """The workers KubeRay runs for a group: ``replicas`` (default 0) held within
    ``minReplicas`` (default 0) and ``maxReplicas`` (default unbounded)."""
    replicas = m.integer(group, "replicas", path, default=0, minimum=0)
    low = m.optional_integer(group, "minReplicas", path, minimum=0) or 0
    high = m.optional_integer(group, "maxReplicas", path, minimum=0)
    if high is not None and low > high:
        return high
    if replicas < low:
        return low
    return replicas if high is None else min(replicas, high)


class RayCluster(GenericJob):
    GROUP = "ray.io"
    VERSION = "v1"
    KIND = "RayCluster"
    PLURAL = "rayclusters"
    SUSPEND = ("spec", "suspend")
    SUCCEEDED = ""  # a RayCluster never finishes by itself
    FAILED = ""

    def kind_templates(self) -> list[Template]:
        return cluster_templates(m.required_mapping(self.obj, "spec", ""), ("spec",))

    def finished(self) -> Finished | None:
        return None
