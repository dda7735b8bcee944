"""A ``batch/v1`` Job as a gang: one pod set ``main``.

Why it exists: the Job is the kind every cluster serves; this module says where
its pods, ``suspend`` flag and terminal conditions are.

What must stay true: a Job is one pod set ``main`` of ``parallelism`` pods
(fewer if ``completions`` is smaller), its time limit
``spec.activeDeadlineSeconds``; the annotation
``queuemgr.io/job-min-parallelism`` allows partial admission down to that many
pods, and a partial admission runs the Job with ``parallelism`` set to the pods
admitted (restored on suspension); every count is a whole number of pods, at
least one; its template is not changed in the request that suspends it.
"""

from __future__ import annotations

from queuemgr.k8s import manifest as m
from queuemgr.k8s.jobframework import GenericJob, Template
from queuemgr.k8s.manifest import ManifestError

MIN_PARALLELISM = "queuemgr.io/job-min-parallelism"


def pods_per_job(job_spec: m.Json | object, path: str) -> int:
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
    # Node selector, tolerations and the rest of the scheduling directives of a Job's
    # template may change only while it is suspended (and has no active pods).
    TEMPLATE_FROZEN_WHILE_RUNNING = True

    def kind_templates(self) -> list[Template]:
        spec = dict(m.required_mapping(self.obj, "spec", ""))
        count = pods_per_job(spec, "spec")
        minimum = None
        raw = m.annotation_map(self.obj).get(MIN_PARALLELISM)
        if raw is not None:
            path = f"metadata.annotations[{MIN_PARALLELISM}]"
            if not raw.isdigit() or not 1 <= int(raw) <= count:
                raise ManifestError(path, raw, f"expected a whole number from 1 to {count}, got")
            minimum = int(raw)
        return [
            Template(
                name="main",
                count=count,
                tokens=("spec", "template"),
                min_count=minimum,
                count_field=("spec", "parallelism"),
            )
        ]

    def max_runtime(self) -> float | None:
        spec = m.mapping(self.obj, "spec", "")
        seconds = m.optional_integer(spec, "activeDeadlineSeconds", "spec", minimum=1)
        return None if seconds is None else float(seconds)
