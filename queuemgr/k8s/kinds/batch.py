"""The job kinds queuemgr manages: ``batch/v1`` Job, JobSet and Kubeflow PyTorchJob.

Why it exists: each kind keeps its pods, its ``suspend`` flag and its terminal
conditions in a different place; this module says where, and
:class:`~queuemgr.k8s.jobframework.GenericJob` does the rest.

What must stay true (the gang each kind is, as Kueue reads them):

- a Job is one pod set ``main`` of ``parallelism`` pods (fewer if
  ``completions`` is smaller), its time limit ``spec.activeDeadlineSeconds``;
  the annotation ``queuemgr.io/job-min-parallelism`` allows partial admission
  down to that many pods;
- a JobSet is one pod set per ``replicatedJobs`` entry, named after it, of
  ``replicas`` x pods-per-Job pods; it finishes with ``Completed``/``Failed``;
- a PyTorchJob is one pod set per replica type (``master`` first, then
  ``worker``, then any other, lower-cased) of ``replicas`` pods, all one gang;
  it is suspended through ``spec.runPolicy.suspend`` and finishes with
  ``Succeeded``/``Failed``;
- every count is a whole number of pods, at least one.
"""

from __future__ import annotations

from typing import ClassVar

from queuemgr.k8s import manifest as m
from queuemgr.k8s.jobframework import GenericJob, Template
from queuemgr.k8s.manifest import ManifestError

MIN_PARALLELISM = "queuemgr.io/job-min-parallelism"


def _pods_per_job(job_spec: m.Json | object, path: str) -> int:
    """Pods a Job runs at once: ``parallelism`` (default 1), capped by ``completions``."""
    spec = job_spec if isinstance(job_spec, dict) else {}
    parallelism = m.integer(spec, "parallelism", path, default=1, minimum=0)
    completions = m.optional_integer(spec, "completions", path, minimum=0)
    pods = parallelism if completions is None else min(parallelism, completions)
    if pods < 1:
        raise ManifestError(
            m.child(path, "parallelism"), parallelism, "a queued Job must run at least one pod; got"
        )
    return pods


class BatchJob(GenericJob):
    GROUP = "batch"
    VERSION = "v1"
    KIND = "Job"
    PLURAL = "jobs"
    SUSPEND = ("spec", "suspend")
    SUCCEEDED = "Complete"
    FAILED = "Failed"

    def templates(self) -> list[Template]:
        spec = dict(m.required_mapping(self.obj, "spec", ""))
        count = _pods_per_job(spec, "spec")
        minimum = None
        raw = m.annotation_map(self.obj).get(MIN_PARALLELISM)
        if raw is not None:
            path = f"metadata.annotations[{MIN_PARALLELISM}]"
            if not raw.isdigit() or not 1 <= int(raw) <= count:
                raise ManifestError(path, raw, f"expected a whole number from 1 to {count}, got")
            minimum = int(raw)
        return [Template(name="main", count=count, tokens=("spec", "template"), min_count=minimum)]

    def max_runtime(self) -> float | None:
        spec = m.mapping(self.obj, "spec", "")
        seconds = m.optional_integer(spec, "activeDeadlineSeconds", "spec", minimum=1)
        return None if seconds is None else float(seconds)


class JobSet(GenericJob):
    GROUP = "jobset.x-k8s.io"
    VERSION = "v1alpha2"
    KIND = "JobSet"
    PLURAL = "jobsets"
    SUSPEND = ("spec", "suspend")
    SUCCEEDED = "Completed"
    FAILED = "Failed"

    def templates(self) -> list[Template]:
        spec = m.required_mapping(self.obj, "spec", "")
        jobs = m.sequence(spec, "replicatedJobs", "spec")
        if not jobs:
            raise ManifestError("spec.replicatedJobs", list(jobs), "a JobSet needs at least one")
        out = []
        seen: set[str] = set()
        for i, job in enumerate(jobs):
            path = f"spec.replicatedJobs[{i}]"
            if not isinstance(job, dict):
                raise ManifestError(path, job, "expected an object, got")
            name = m.string(job, "name", path)
            if not name or name in seen:
                raise ManifestError(f"{path}.name", name, "expected a unique, non-empty name, got")
            seen.add(name)
            replicas = m.integer(job, "replicas", path, default=1, minimum=1)
            template = m.required_mapping(job, "template", path)
            pods = _pods_per_job(
                m.required_mapping(template, "spec", f"{path}.template"), f"{path}.template.spec"
            )
            tokens = ("spec", "replicatedJobs", i, "template", "spec", "template")
            out.append(Template(name=name, count=replicas * pods, tokens=tokens))
        return out


class PyTorchJob(GenericJob):
    GROUP = "kubeflow.org"
    VERSION = "v1"
    KIND = "PyTorchJob"
    PLURAL = "pytorchjobs"
    SUSPEND = ("spec", "runPolicy", "suspend")
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    ORDER: ClassVar[tuple[str, ...]] = ("Master", "Worker")

    def templates(self) -> list[Template]:
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
