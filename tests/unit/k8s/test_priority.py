"""A job's priority: its label, else its first pod template's class, else the global default."""

from __future__ import annotations

from typing import Any

import pytest

from queuemgr.k8s.jobframework import PRIORITY_LABEL
from queuemgr.k8s.jobs import job_for
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.priority import job_priority
from tests.unit.k8s.helpers import manifest

# Where each kind's first and second pod templates sit (see tests/unit/k8s/manifests).
TEMPLATES: dict[str, list[tuple[Any, ...]]] = {
    "job-gpu": [("spec", "template")],
    "jobset": [
        ("spec", "replicatedJobs", 0, "template", "spec", "template"),
        ("spec", "replicatedJobs", 1, "template", "spec", "template"),
    ],
    "pytorchjob": [
        ("spec", "pytorchReplicaSpecs", "Master", "template"),
        ("spec", "pytorchReplicaSpecs", "Worker", "template"),
    ],
}
CLASSES = [
    {"metadata": {"name": "low"}, "value": -10},
    {"metadata": {"name": "high"}, "value": 1000},
    {"metadata": {"name": "batch"}, "value": 100, "globalDefault": True},
]


def _job(kind: str, *, classes: dict[int, str] | None = None, label: str | None = None) -> Any:
    obj = manifest(kind)
    for i, name in (classes or {}).items():
        here: Any = obj
        for t in TEMPLATES[kind][i]:
            here = here[t]
        here["spec"]["priorityClassName"] = name
    if label is not None:
        obj["metadata"].setdefault("labels", {})[PRIORITY_LABEL] = label
    return job_for(obj)


@pytest.mark.parametrize(
    ("kind", "classes", "label", "priority"),
    [
        pytest.param("job-gpu", None, None, 100, id="none-takes-the-global-default"),
        pytest.param("job-gpu", {0: "high"}, None, 1000, id="job-template-class"),
        pytest.param("job-gpu", {0: "high"}, "low", -10, id="label-wins-over-the-pods-class"),
        pytest.param("jobset", {1: "low"}, None, -10, id="jobset-first-template-with-one"),
        pytest.param("jobset", {0: "high", 1: "low"}, None, 1000, id="jobset-first-template"),
        pytest.param("pytorchjob", {0: "high"}, None, 1000, id="pytorchjob-master"),
        pytest.param("pytorchjob", {1: "low"}, None, -10, id="pytorchjob-worker"),
    ],
)
def test_priority_comes_from_the_named_class(
    kind: str, classes: dict[int, str] | None, label: str | None, priority: int
) -> None:
    job = _job(kind, classes=classes, label=label)
    assert job_priority(job, CLASSES) == priority
    assert job.workload(priority=job_priority(job, CLASSES)).priority == priority


def test_without_a_global_default_no_class_is_priority_0() -> None:
    assert job_priority(_job("job-gpu"), CLASSES[:2]) == 0


@pytest.mark.parametrize(
    ("kind", "classes", "label", "path"),
    [
        pytest.param(
            "job-gpu", {0: "urgent"}, None, "spec.template.spec.priorityClassName", id="template"
        ),
        pytest.param(
            "pytorchjob",
            {1: "urgent"},
            None,
            "spec.pytorchReplicaSpecs.Worker.template.spec.priorityClassName",
            id="pytorchjob-worker",
        ),
        pytest.param("jobset", None, "urgent", f"metadata.labels[{PRIORITY_LABEL}]", id="label"),
    ],
)
def test_an_unknown_class_is_an_error_naming_the_field_and_the_name(
    kind: str, classes: dict[int, str] | None, label: str | None, path: str
) -> None:
    with pytest.raises(ManifestError) as info:
        job_priority(_job(kind, classes=classes, label=label), CLASSES)
    assert info.value.path == path
    assert "'urgent'" in str(info.value) and "no PriorityClass" in str(info.value)
