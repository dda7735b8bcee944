"""A Kubeflow PyTorchJob as a gang: one pod set per replica type.

Why it exists: the training operator's PyTorchJob (``kubeflow.org/v1``) keeps
its replicas in a map and its ``suspend`` flag under ``runPolicy``; this
module says where they are.

What must stay true: one pod set per replica type (``master`` first, then
``worker``, then any other, lower-cased) of ``replicas`` pods, all one gang;
suspended through ``spec.runPolicy.suspend``; it finishes with
``Succeeded``/``Failed``.
"""

from __future__ import annotations

from typing import ClassVar

from queuemgr.k8s import manifest as m
from queuemgr.k8s.jobframework import GenericJob, Template
from queuemgr.k8s.manifest import ManifestError


class PyTorchJob(GenericJob):
    GROUP = "kubeflow.org"
    VERSION = "v1"
    KIND = "PyTorchJob"
    PLURAL = "pytorchjobs"
    SUSPEND = ("spec", "runPolicy", "suspend")
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ORDER: ClassVar[tuple[str, ...]] = ("Master", "Worker")

    def kind_templates(self) -> list[Template]:
        spec = m.required_mapping(self.obj, "spec", "")
        specs = m.required_mapping(spec, "pytorchReplicaSpecs", "spec")
        types = sorted(specs, key=lambda t: (self.ORDER.index(t) if t in self.ORDER else 2, t))
        if not types:
            raise ManifestError("spec.pytorchReplicaSpecs", {}, "needs a Master or Worker, got")
        out = []
        for kind in types:
            path = f"spec.pytorchReplicaSpecs.{kind}"
            replica = m.required_mapping(specs, kind, "spec.pytorchReplicaSpecs")
            replicas = m.integer(replica, "replicas", path, default=1, minimum=1)
            tokens = ("spec", "pytorchReplicaSpecs", kind, "template")
            out.append(Template(name=kind.lower(), count=replicas, tokens=tokens))
        return out

    def max_runtime(self) -> float | None:
        policy = m.mapping(m.mapping(self.obj, "spec", ""), "runPolicy", "spec")
        seconds = m.optional_integer(policy, "activeDeadlineSeconds", "spec.runPolicy", minimum=1)
        return None if seconds is None else float(seconds)
