"""The status written on jobs: annotations and conditions, only what changed."""

from __future__ import annotations

from typing import Any

from queuemgr.k8s.jobstatus import (
    ADMITTED_CONDITION,
    ETA_ANNOTATION,
    PENDING_CONDITION,
    POSITION_ANNOTATION,
    REASON_ANNOTATION,
    QueueStatus,
    annotation_patch,
    condition_patch,
)
from queuemgr.k8s.patch import Patch

WAITING = QueueStatus(
    admitted=False,
    reason="QuotaExceeded",
    message="needs 8 nvidia.com/gpu, 0 free",
    position="2 in its LocalQueue, 3 in ClusterQueue team-a",
    eta="2026-01-01T00:00:00Z",
)
RUNNING = QueueStatus(admitted=True, reason="Admitted", message="ClusterQueue team-a, flavor h100")


def job(annotations: dict[str, str] | None = None, conditions: list[Any] | None = None) -> Any:
    meta: dict[str, Any] = {"name": "j", "namespace": "ns", "resourceVersion": "7"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "status": {"conditions": conditions or []}}


def apply(obj: Any, patch: Patch) -> Any:
    """A tiny JSON Patch applier for the operations these patches use."""
    import copy

    out = copy.deepcopy(obj)
    for op in patch.as_json():
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = out
        for p in parts[:-1]:
            parent = parent[p]
        if op["op"] == "test":
            assert parent[parts[-1]] == op["value"]
        elif op["op"] == "remove":
            del parent[parts[-1]]
        else:
            parent[parts[-1]] = op["value"]
    return out


def test_annotations_say_why_where_and_when_then_nothing_more_to_write() -> None:
    obj = apply(job(), annotation_patch(job(), WAITING))
    notes = obj["metadata"]["annotations"]
    assert notes[REASON_ANNOTATION] == "QuotaExceeded: needs 8 nvidia.com/gpu, 0 free"
    assert notes[POSITION_ANNOTATION].startswith("2 in its LocalQueue")
    assert notes[ETA_ANNOTATION] == "2026-01-01T00:00:00Z"
    assert not annotation_patch(obj, WAITING)  # unchanged: no write
    admitted = apply(obj, annotation_patch(obj, RUNNING))["metadata"]["annotations"]
    assert admitted[REASON_ANNOTATION].startswith("Admitted")
    assert POSITION_ANNOTATION not in admitted and ETA_ANNOTATION not in admitted


def test_other_annotations_are_kept() -> None:
    obj = job({"team": "vision"})
    notes = apply(obj, annotation_patch(obj, WAITING, {"x/y": "1"}))["metadata"]["annotations"]
    assert notes["team"] == "vision" and notes["x/y"] == "1"


def test_conditions_flip_together_and_keep_the_job_controllers() -> None:
    theirs = {"type": "Suspended", "status": "True", "reason": "JobSuspended"}
    obj = job(conditions=[theirs])
    patch = condition_patch(obj, WAITING, "2026-01-01T00:00:00Z")
    assert patch.as_json()[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    obj = apply(obj, patch)
    by_type = {c["type"]: c for c in obj["status"]["conditions"]}
    assert by_type["Suspended"] == theirs
    assert by_type[PENDING_CONDITION]["status"] == "True"
    assert by_type[PENDING_CONDITION]["reason"] == "QuotaExceeded"
    assert by_type[ADMITTED_CONDITION]["status"] == "False"
    assert not condition_patch(obj, WAITING, "2026-01-01T00:05:00Z")  # nothing changed
    obj = apply(obj, condition_patch(obj, RUNNING, "2026-01-01T00:09:00Z"))
    by_type = {c["type"]: c for c in obj["status"]["conditions"]}
    assert by_type[ADMITTED_CONDITION]["status"] == "True"
    assert by_type[ADMITTED_CONDITION]["lastTransitionTime"] == "2026-01-01T00:09:00Z"
    assert len(obj["status"]["conditions"]) == 3
