"""RayCluster and RayJob as gangs, and partial admission written into the job and undone."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from queuemgr.controller.kube_backend import workload_label_patch
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.jobframework import ORIGINAL_COUNTS_ANNOTATION
from queuemgr.k8s.jobs import Finished, Placement, PodSetAssignment, job_for
from queuemgr.k8s.kinds.raycluster import desired_replicas
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.tenant import status
from tests.unit.k8s.helpers import apply_patch, manifest

CPU, MEM = ResourceName("cpu"), ResourceName("memory")
MI = 2**20


def _worker(obj: dict[str, Any], i: int = 0) -> dict[str, Any]:
    spec = obj["spec"].get("rayClusterSpec", obj["spec"])
    group: dict[str, Any] = spec["workerGroupSpecs"][i]
    return group


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({"replicas": 3}, 3, id="replicas"),
        pytest.param({}, 0, id="crd-default-zero"),
        pytest.param({"replicas": 1, "minReplicas": 2}, 2, id="raised-to-min"),
        pytest.param({"replicas": 9, "maxReplicas": 4}, 4, id="capped-at-max"),
        pytest.param({"replicas": 1, "minReplicas": 5, "maxReplicas": 3}, 3, id="min-above-max"),
    ],
)
def test_workers_are_what_kuberay_would_run(fields: dict[str, int], expected: int) -> None:
    assert desired_replicas(fields, "g") == expected


def test_a_group_counts_hosts_and_an_empty_or_suspended_group_adds_no_pod_set() -> None:
    obj = manifest("raycluster")
    _worker(obj, 0)["numOfHosts"] = 2
    _worker(obj, 1)["replicas"] = 0
    _worker(obj, 1)["minReplicas"] = 0
    sets = {ps.name: ps for ps in job_for(obj).pod_sets()}
    assert list(sets) == ["head", "gpu"]
    assert sets["gpu"].count == 8
    assert sets["gpu"].min_count is None  # a multi-host replica is all or nothing

    _worker(obj, 1)["replicas"] = 2
    _worker(obj, 1)["suspend"] = True
    assert [ps.name for ps in job_for(obj).pod_sets()] == ["head", "gpu"]


@pytest.mark.parametrize(
    ("mins", "expected"),
    [
        pytest.param((2, 0), {"gpu": 2}, id="one-group-asks"),
        pytest.param((0, 0), {}, id="crd-default-zero-asks-nothing"),
        pytest.param((2, 1), {}, id="two-groups-ask-none-honoured"),
        pytest.param((4, 0), {}, id="min-equals-replicas"),
    ],
)
def test_min_replicas_allows_partial_admission_of_one_group(
    mins: tuple[int, int], expected: dict[str, int]
) -> None:
    obj = manifest("raycluster")
    _worker(obj, 0)["minReplicas"], _worker(obj, 1)["minReplicas"] = mins
    sets = job_for(obj).pod_sets()
    assert {ps.name: ps.min_count for ps in sets if ps.min_count is not None} == expected


@pytest.mark.parametrize(
    ("name", "edit", "path"),
    [
        pytest.param(
            "raycluster",
            lambda o: o["spec"].update(enableInTreeAutoscaling=True),
            "spec.enableInTreeAutoscaling",
            id="autoscaling-cluster",
        ),
        pytest.param(
            "rayjob",
            lambda o: o["spec"]["rayClusterSpec"].update(enableInTreeAutoscaling=True),
            "spec.rayClusterSpec.enableInTreeAutoscaling",
            id="autoscaling-job",
        ),
        pytest.param(
            "rayjob",
            lambda o: o["spec"].update(clusterSelector={"ray.io/cluster": "shared"}),
            "spec.clusterSelector",
            id="existing-cluster",
        ),
        pytest.param(
            "rayjob",
            lambda o: o["spec"].pop("rayClusterSpec"),
            "spec.rayClusterSpec",
            id="no-cluster-spec",
        ),
        pytest.param(
            "raycluster",
            lambda o: o["spec"]["workerGroupSpecs"][1].update(groupName="gpu"),
            "spec.workerGroupSpecs[1].groupName",
            id="duplicate-group",
        ),
        pytest.param(
            "raycluster",
            lambda o: o["spec"]["workerGroupSpecs"][0].update(groupName="head"),
            "spec.workerGroupSpecs[0].groupName",
            id="group-named-head",
        ),
        pytest.param(
            "rayjob",
            lambda o: o["spec"].update(submissionMode="Carrier"),
            "spec.submissionMode",
            id="unknown-mode",
        ),
        pytest.param(
            "raycluster",
            lambda o: o["spec"]["workerGroupSpecs"][0].update(replicas=-1),
            "spec.workerGroupSpecs[0].replicas",
            id="negative-replicas",
        ),
    ],
)
def test_unqueueable_ray_objects_name_the_field(name: str, edit: Any, path: str) -> None:
    obj = manifest(name)
    edit(obj)
    with pytest.raises(ManifestError) as caught:
        job_for(obj).pod_sets()
    assert str(caught.value).startswith(path)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        pytest.param("K8sJobMode", ["head", "trials", "submitter"], id="k8s-job"),
        pytest.param("HTTPMode", ["head", "trials"], id="http"),
        pytest.param("InteractiveMode", ["head", "trials"], id="interactive"),
        pytest.param("SidecarMode", ["head", "trials"], id="sidecar"),
    ],
)
def test_the_submitter_is_charged_where_kuberay_runs_it(mode: str, expected: list[str]) -> None:
    obj = manifest("rayjob")
    obj["spec"]["submissionMode"] = mode
    sets = {ps.name: ps for ps in job_for(obj).pod_sets()}
    assert list(sets) == expected
    head = sets["head"].requests
    if mode == "SidecarMode":  # the submitter container runs in the head pod
        assert (head[CPU], head[MEM]) == (2500, 8 * 2**30 + 200 * MI)
    else:
        assert (head[CPU], head[MEM]) == (2000, 8 * 2**30)


def test_a_submitter_template_of_the_users_is_charged_and_pinned() -> None:
    obj = manifest("rayjob")
    obj["spec"]["submitterPodTemplate"] = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "submit", "resources": {"requests": {"cpu": "1"}}}],
        }
    }
    job = job_for(obj)
    assert job.pod_sets()[-1].requests == {CPU: 1000}
    placement = Placement(cluster_queue="q", flavor="f", node_labels={"pool": "gpu"})
    running = apply_patch(obj, job.run_with(placement).as_json())
    assert running["spec"]["submitterPodTemplate"]["spec"]["nodeSelector"] == {"pool": "gpu"}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param({}, None, id="new"),
        pytest.param(
            {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, None, id="running"
        ),
        pytest.param({"jobDeploymentStatus": "Suspended"}, None, id="suspended"),
        pytest.param(
            {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "message": "done"},
            Finished(succeeded=True, reason="SUCCEEDED", message="done"),
            id="succeeded",
        ),
        pytest.param(
            {"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"},
            Finished(succeeded=False, reason="STOPPED"),
            id="stopped",
        ),
        pytest.param(
            {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded", "message": "late"},
            Finished(succeeded=False, reason="DeadlineExceeded", message="late"),
            id="failed",
        ),
        pytest.param(
            {"jobDeploymentStatus": "ValidationFailed", "message": "bad spec"},
            Finished(succeeded=False, reason="ValidationFailed", message="bad spec"),
            id="validation-failed",
        ),
    ],
)
def test_a_rayjob_finishes_by_its_deployment_status(
    status: dict[str, str], expected: Finished | None
) -> None:
    obj = manifest("rayjob")
    obj["status"] = status
    assert job_for(obj).finished() == expected


def test_a_raycluster_never_finishes_by_itself() -> None:
    obj = manifest("raycluster")
    obj["status"] = {"state": "ready", "conditions": [{"type": "Failed", "status": "True"}]}
    assert job_for(obj).finished() is None


def test_rayjob_time_limit() -> None:
    assert job_for(manifest("rayjob")).max_runtime() == 7200.0


@pytest.mark.parametrize(
    ("name", "pod_set", "field", "admitted"),
    [
        pytest.param("raycluster", "gpu", ("spec", "workerGroupSpecs", 0, "replicas"), 3, id="ray"),
        pytest.param("job-cpu", "main", ("spec", "parallelism"), 3, id="job"),
    ],
)
def test_a_partial_admission_runs_fewer_pods_and_suspension_restores_the_count(
    name: str, pod_set: str, field: tuple[Any, ...], admitted: int
) -> None:
    def at(obj: dict[str, Any]) -> Any:
        value: Any = obj
        for token in field:
            value = value[token]
        return value

    original = apply_patch(manifest(name), job_for(manifest(name)).suspend().as_json())
    before = job_for(original).pod_sets()
    assert 0 < admitted < next(ps.count for ps in before if ps.name == pod_set)
    placement = Placement(
        cluster_queue="q",
        flavor="f",
        node_labels={},
        pod_sets=(PodSetAssignment(pod_set=pod_set, nodes={"n1": admitted}, pods=admitted),),
    )
    running = apply_patch(original, job_for(original).run_with(placement).as_json())
    assert at(running) == admitted
    notes = running["metadata"]["annotations"]
    assert json.loads(notes[ORIGINAL_COUNTS_ANNOTATION]) == {pod_set: at(original)}
    # the gang is still the one submitted: quota and the webhook's edit check see no change
    assert job_for(running).pod_sets() == before
    assert not job_for(running).run_with(placement)

    suspended = apply_patch(running, job_for(running).suspend().as_json())
    assert at(suspended) == at(original)
    assert ORIGINAL_COUNTS_ANNOTATION not in suspended["metadata"]["annotations"]
    assert job_for(suspended).pod_sets() == before


def test_a_whole_admission_writes_no_count() -> None:
    obj = manifest("raycluster")
    placement = Placement(
        cluster_queue="q",
        flavor="f",
        node_labels={},
        pod_sets=(PodSetAssignment(pod_set="gpu", nodes={"n1": 4}, pods=4),),
    )
    running = apply_patch(obj, job_for(obj).run_with(placement).as_json())
    assert _worker(running)["replicas"] == 4
    assert ORIGINAL_COUNTS_ANNOTATION not in running["metadata"]["annotations"]


@pytest.mark.parametrize("note", ["{", '{"gpu": 0}', '{"gpu": true}', "[4]", '{"gpu": "4"}'])
def test_an_unreadable_count_note_is_an_error_naming_it(note: str) -> None:
    obj = copy.deepcopy(manifest("raycluster"))
    obj["metadata"]["annotations"] = {ORIGINAL_COUNTS_ANNOTATION: note}
    with pytest.raises(ManifestError) as caught:
        job_for(obj).pod_sets()
    assert ORIGINAL_COUNTS_ANNOTATION in str(caught.value)


def test_kuberays_default_submitter_is_neither_labelled_nor_expected() -> None:
    """The default submitter's template is not in the object: labelling it would create
    ``spec.submitterPodTemplate`` without a spec, which the CRD's schema refuses."""
    obj = manifest("rayjob")
    assert "submitterPodTemplate" not in obj["spec"]
    job = job_for(obj)
    absent = [t.name for t in job.templates() if not job.in_object(t)]
    assert absent == ["submitter"]
    touched = {op["path"] for op in workload_label_patch(job).as_json()}
    assert touched and not any("submitterPodTemplate" in path for path in touched)


def test_the_tenants_status_reads_the_annotations_as_the_controller_writes_them() -> None:
    """A RayJob's status keeps no conditions: the reason annotation is all it has."""
    obj = manifest("rayjob")
    obj["spec"]["suspend"] = True
    obj["metadata"]["annotations"] = {
        "queuemgr.io/reason": "CohortExhausted: needs 3 nvidia.com/gpu on h100",
        "queuemgr.io/position": "2 in LocalQueue research, 5 in ClusterQueue team-b",
    }
    got = status(obj)
    assert (got["state"], got["reason"], got["message"], got["position"]) == (
        "Pending",
        "CohortExhausted",
        "needs 3 nvidia.com/gpu on h100",
        2,
    )
