"""A flavor's tolerations on the pinned pod templates: added by ``run_with`` (none twice),
recorded once, put back exactly by ``suspend`` (a running Job's once it is suspended)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from queuemgr.core.model import (
    Admission,
    ClusterQueueName,
    FlavorName,
    NodeName,
    PodSetPlacement,
    ResourceFlavor,
    TaintEffect,
    Toleration,
    WorkloadId,
)
from queuemgr.k8s.jobs import (
    ORIGINAL_TOLERATIONS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    Placement,
    PodSetAssignment,
    job_for,
)
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.placement import toleration_json
from tests.unit.k8s.helpers import apply_patch, manifest

SPOT = Toleration(key="spot", value="true", effect=TaintEffect.NO_SCHEDULE)
SPOT_JSON = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
ANY_NO_EXECUTE = Toleration(operator="Exists", effect=TaintEffect.NO_EXECUTE)
# The same tolerations as job-gpu.yaml's template already has (one spelled without its
# operator there): never added twice.
GPU = Toleration(key="nvidia.com/gpu", operator="Exists", effect=TaintEffect.NO_SCHEDULE)
DEDICATED = Toleration(key="dedicated", value="ml")

TOLERANT = Placement(
    cluster_queue="team-a",
    flavor="spot",
    node_labels={"pool": "spot"},
    pod_sets=(PodSetAssignment(pod_set="main", nodes={"n1": 4}),),
    tolerations=(SPOT, GPU, DEDICATED, ANY_NO_EXECUTE),
)
PLAIN = Placement(cluster_queue="team-a", flavor="h100", node_labels={"pool": "h100"})
OTHER = Placement(
    cluster_queue="team-a",
    flavor="reserved",
    node_labels={"pool": "reserved"},
    tolerations=(Toleration(key="reserved", operator="Exists"),),
)
KINDS = ["job-gpu", "job-cpu", "jobset", "pytorchjob", "raycluster", "rayjob"]


def _suspended(name: str) -> dict[str, Any]:
    obj = manifest(name)
    return apply_patch(obj, job_for(obj).suspend().as_json())


def _templates(obj: dict[str, Any]) -> dict[str, Any]:
    """Each pinned pod template's tolerations field (absent: the string "absent")."""
    job = job_for(obj)
    out = {}
    for t in job.templates():
        parent: Any = obj
        for token in t.tokens[:-1]:
            parent = parent[token]
        if t.tokens[-1] in parent:
            spec = parent[t.tokens[-1]]["spec"]
            out[t.name] = copy.deepcopy(spec.get("tolerations", "absent"))
    return out


def _notes(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def test_run_with_adds_the_flavors_tolerations_once_and_records_the_users() -> None:
    original = _suspended("job-gpu")
    users = original["spec"]["template"]["spec"]["tolerations"]
    running = apply_patch(original, job_for(original).run_with(TOLERANT).as_json())
    assert running["spec"]["template"]["spec"]["tolerations"] == [
        *users,  # the user's first, as written; GPU and DEDICATED were there already
        SPOT_JSON,
        {"operator": "Exists", "effect": "NoExecute"},
    ]
    assert json.loads(_notes(running)[ORIGINAL_TOLERATIONS_ANNOTATION]) == {"main": users}
    (ps,) = job_for(running).pod_sets()
    assert SPOT in ps.tolerations and ANY_NO_EXECUTE in ps.tolerations
    assert not job_for(running).run_with(TOLERANT)  # the same admission again: nothing


def test_a_running_job_keeps_its_template_until_it_is_suspended() -> None:
    """The API server refuses a Job's template change in the request that suspends it:
    suspend() leaves the template alone, and restores it once the Job is suspended."""
    original = _suspended("job-gpu")
    running = apply_patch(original, job_for(original).run_with(TOLERANT).as_json())
    ops = job_for(running).suspend().as_json()
    assert not any("/spec/template" in op["path"] for op in ops)
    stopped = apply_patch(running, ops)
    assert job_for(stopped).is_suspended()
    assert _templates(stopped) == _templates(running)
    assert ORIGINAL_TOLERATIONS_ANNOTATION in _notes(stopped)

    restored = apply_patch(stopped, job_for(stopped).suspend().as_json())
    assert _templates(restored) == _templates(original)
    assert ORIGINAL_TOLERATIONS_ANNOTATION not in _notes(restored)
    assert not job_for(restored).suspend()  # nothing left to change


_STARTED = "2026-12-07T10:00:00Z"
_MARKED = {"type": "Suspended", "status": "True"}


@pytest.mark.parametrize(
    ("status", "released"),
    [
        pytest.param(None, True, id="never-started"),
        pytest.param({"startTime": _STARTED, "active": 2}, False, id="pods-active"),
        pytest.param({"startTime": _STARTED}, False, id="started-not-marked"),
        pytest.param({"startTime": _STARTED, "conditions": [_MARKED]}, True, id="marked"),
        pytest.param(
            {"startTime": _STARTED, "active": 1, "conditions": [_MARKED]},
            False,
            id="marked-pods-active",
        ),
    ],
)
def test_a_suspended_jobs_template_is_released_as_the_api_server_allows(
    status: dict[str, Any] | None, released: bool
) -> None:
    original = _suspended("job-gpu")
    running = apply_patch(original, job_for(original).run_with(TOLERANT).as_json())
    stopped = apply_patch(running, job_for(running).suspend().as_json())
    if status is not None:
        stopped["status"] = status
    job = job_for(stopped)
    assert job.template_released() is released
    leftover = job.leftover_restore()
    assert bool(leftover) is released
    # suspend() of a suspended Job would carry the same restore, never a refused one.
    assert any("/spec/template" in op["path"] for op in job.suspend().as_json()) is released
    if released:
        restored = apply_patch(stopped, leftover.as_json())
        assert _templates(restored) == _templates(original)
        assert not job_for(restored).leftover_restore()  # put back once


@pytest.mark.parametrize("name", ["jobset", "pytorchjob", "raycluster", "rayjob"])
def test_kinds_restored_while_suspending_leave_nothing_over(name: str) -> None:
    original = _suspended(name)
    running = apply_patch(original, job_for(original).run_with(TOLERANT).as_json())
    stopped = apply_patch(running, job_for(running).suspend().as_json())
    assert job_for(stopped).template_released()
    assert not job_for(stopped).leftover_restore()
    assert not job_for(running).leftover_restore()  # running: nothing is put back


def test_an_unrestored_job_admitted_elsewhere_starts_from_the_users_tolerations() -> None:
    original = _suspended("job-gpu")
    users = original["spec"]["template"]["spec"]["tolerations"]
    running = apply_patch(original, job_for(original).run_with(TOLERANT).as_json())
    stopped = apply_patch(running, job_for(running).suspend().as_json())  # not restored
    elsewhere = apply_patch(stopped, job_for(stopped).run_with(OTHER).as_json())
    assert elsewhere["spec"]["template"]["spec"]["tolerations"] == [
        *users,
        {"key": "reserved", "operator": "Exists"},  # no stale spot tolerations
    ]
    plain = apply_patch(stopped, job_for(stopped).run_with(PLAIN).as_json())
    assert plain["spec"]["template"]["spec"]["tolerations"] == users


@pytest.mark.parametrize("name", KINDS)
def test_run_with_then_suspend_restores_every_template_exactly(name: str) -> None:
    original = _suspended(name)
    running = apply_patch(original, job_for(original).run_with(TOLERANT).as_json())
    pinned = _templates(running)
    assert pinned, "no pod template pinned"
    for tolerations in pinned.values():
        assert SPOT_JSON in tolerations
    stopped = apply_patch(running, job_for(running).suspend().as_json())
    if name.startswith("job-"):  # a Job: once it is suspended
        stopped = apply_patch(stopped, job_for(stopped).suspend().as_json())
    assert _templates(stopped) == _templates(original)  # "absent" stays absent
    assert ORIGINAL_TOLERATIONS_ANNOTATION not in _notes(stopped)
    assert PLACEMENT_ANNOTATION not in _notes(stopped)
    # what the pod sets tolerate is the user's again (the node selectors are not restored)
    tolerated = [ps.tolerations for ps in job_for(original).pod_sets()]
    assert [ps.tolerations for ps in job_for(stopped).pod_sets()] == tolerated


def test_a_pytorchjob_is_restored_in_the_request_that_suspends_it() -> None:
    original = _suspended("pytorchjob")
    assert set(_templates(original).values()) == {"absent"}
    running = apply_patch(original, job_for(original).run_with(TOLERANT).as_json())
    expected = [toleration_json(t) for t in TOLERANT.tolerations]
    assert _templates(running) == {"master": expected, "worker": expected}
    recorded = json.loads(_notes(running)[ORIGINAL_TOLERATIONS_ANNOTATION])
    assert recorded == {"master": None, "worker": None}  # no field: removed on suspend
    stopped = apply_patch(running, job_for(running).suspend().as_json())
    assert job_for(stopped).is_suspended()
    assert _templates(stopped) == {"master": "absent", "worker": "absent"}
    assert ORIGINAL_TOLERATIONS_ANNOTATION not in _notes(stopped)
    assert not job_for(stopped).suspend()


def test_a_flavor_without_tolerations_writes_none_and_records_none() -> None:
    original = _suspended("pytorchjob")
    ops = job_for(original).run_with(PLAIN).as_json()
    assert not any(op["path"].endswith("/tolerations") for op in ops)
    assert ORIGINAL_TOLERATIONS_ANNOTATION not in _notes(apply_patch(original, ops))


def test_a_toleration_with_seconds_is_not_the_flavors() -> None:
    """tolerationSeconds bounds how long a NoExecute taint is tolerated: another toleration."""
    obj = _suspended("pytorchjob")
    bounded = {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["tolerations"] = [bounded]
    running = apply_patch(obj, job_for(obj).run_with(TOLERANT).as_json())
    tolerations = running["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "tolerations"
    ]
    assert tolerations[0] == bounded
    assert {"operator": "Exists", "effect": "NoExecute"} in tolerations


@pytest.mark.parametrize(
    "recorded",
    ["{not json", '["main"]', '{"main": "spot"}', '{"main": ["spot"]}'],
)
def test_a_bad_record_names_the_annotation(recorded: str) -> None:
    obj = _suspended("job-cpu")
    obj["metadata"]["annotations"][ORIGINAL_TOLERATIONS_ANNOTATION] = recorded
    with pytest.raises(ManifestError) as caught:
        job_for(obj).run_with(TOLERANT)
    assert f"metadata.annotations[{ORIGINAL_TOLERATIONS_ANNOTATION}]" in str(caught.value)


def test_a_template_whose_tolerations_are_not_a_list_is_named() -> None:
    obj = _suspended("job-cpu")
    obj["spec"]["template"]["spec"]["tolerations"] = {"key": "spot"}
    with pytest.raises(ManifestError) as caught:
        job_for(obj).run_with(TOLERANT)
    assert "spec.template.spec.tolerations" in str(caught.value)


def test_placement_of_carries_the_flavors_tolerations() -> None:
    flavor = ResourceFlavor(
        name=FlavorName("spot"), node_labels={"pool": "spot"}, tolerations=(SPOT, GPU)
    )
    admission = Admission(
        workload=WorkloadId("team-a/pretrain"),
        cluster_queue=ClusterQueueName("team-a"),
        flavor=flavor.name,
        placements=(PodSetPlacement(pod_set="main", node=NodeName("n1"), count=4),),
    )
    (ps,) = job_for(manifest("job-gpu")).pod_sets()
    placement = Placement.of(admission, flavor, [ps], {})
    assert placement.tolerations == (SPOT, GPU)
    assert "NoSchedule" not in placement.record()  # the record names the flavor only
