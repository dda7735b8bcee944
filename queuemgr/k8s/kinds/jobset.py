"""A JobSet as a gang: one pod set per ``replicatedJobs`` entry.

Why it exists: JobSet (``jobset.x-k8s.io``) runs groups of Jobs together; this
module says where its pods, ``suspend`` flag and terminal conditions are.

What must stay true: a JobSet is one pod set per ``replicatedJobs`` entry,
named after it, of ``replicas`` x pods-per-Job pods (every count a whole
number, at least one); it finishes with ``Completed``/``Failed``.
"""

from __future__ import annotations

from queuemgr.k8s import manifest as m
from queuemgr.k8s.jobframework import GenericJob, Template
from queuemgr.k8s.kinds.batch import pods_per_job
from queuemgr.k8s.manifest import ManifestError


class JobSet(GenericJob):
    GROUP = "jobset.x-k8s.io"
    VERSION = "v1alpha2"
    KIND = "JobSet"
    PLURAL = "jobsets"
    SUSPEND = ("spec", "suspend")
    SUCCEEDED = "Completed"
    FAILED = "Failed"

    def kind_templates(self) -> list[Template]:
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
            pods = pods_per_job(
                m.required_mapping(template, "spec", f"{path}.template"), f"{path}.template.spec"
            )
            tokens = ("spec", "replicatedJobs", i, "template", "spec", "template")
            out.append(Template(name=name, count=replicas * pods, tokens=tokens))
        return out
