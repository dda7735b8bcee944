"""Each job kind as a gang: pod sets, suspend, run_with and finished on realistic manifests."""

from __future__ import annotations

import dataclasses
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
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.jobs import (
    ORIGINAL_SELECTORS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    QUEUE_LABEL,
    Finished,
    Placement,
    PodSetAssignment,
    UnknownKind,
    job_for,
)
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.placement import recorded_admission
from tests.unit.k8s.helpers import apply_patch, manifest

GPU, CPU, MEM = ResourceName("nvidia.com/gpu"), ResourceName("cpu"), ResourceName("memory")
GI, MI = 2**30, 2**20


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(
            "job-gpu",
            # cpu: the 24-core init container beats 16 + 0.25 app + 0.5 sidecar;
            # memory: 128Gi + 64Mi app + 256Mi sidecar beats the 8Gi init container.
            [("main", 4, {GPU: 8, CPU: 24_000, MEM: 128 * GI + 320 * MI})],
            id="job-init-sidecar-limits",
        ),
        pytest.param(
            "job-cpu",
            [("main", 5, {CPU: 1500, MEM: 2 * GI})],
            id="job-completions-cap-parallelism",
        ),
        pytest.param(
            "jobset",
            [
                ("driver", 1, {CPU: 2000, MEM: 4 * GI}),
                ("workers", 8, {GPU: 2, CPU: 8000, MEM: 32 * GI}),
            ],
            id="jobset-replicas-x-parallelism",
        ),
        pytest.param(
            "pytorchjob",
            [
                ("master", 1, {GPU: 8, CPU: 48_000, MEM: 400 * GI}),
                ("worker", 3, {GPU: 8, CPU: 48_000, MEM: 400 * GI}),
            ],
            id="pytorchjob-master-first",
        ),
        pytest.param(
            "raycluster",
            [
                ("head", 1, {CPU: 4000, MEM: 16 * GI}),
                ("gpu", 4, {GPU: 2, CPU: 16_000, MEM: 64 * GI}),
                ("cpu", 2, {CPU: 8000, MEM: 32 * GI}),
            ],
            id="raycluster-head-then-worker-groups",
        ),
        pytest.param(
            "rayjob",
            [
                ("head", 1, {CPU: 2000, MEM: 8 * GI}),
                ("trials", 3, {GPU: 1, CPU: 8000, MEM: 32 * GI}),
                ("submitter", 1, {CPU: 500, MEM: 200 * MI}),  # KubeRay's default submitter
            ],
            id="rayjob-cluster-plus-default-submitter",
        ),
    ],
)
def test_pod_sets(name: str, expected: list[tuple[str, int, dict[str, int]]]) -> None:
    pod_sets = job_for(manifest(name)).pod_sets()
    assert [(ps.name, ps.count, dict(ps.requests)) for ps in pod_sets] == expected
    for ps in pod_sets:
        assert all(isinstance(v, int) for v in ps.requests.values())


def test_job_pod_set_carries_selector_tolerations_topology_and_min_count() -> None:
    (gpu,) = job_for(manifest("job-gpu")).pod_sets()
    assert gpu.node_selector == {"cloud.example.com/pool": "training"}
    assert gpu.tolerations == (
        Toleration(key="nvidia.com/gpu", operator="Exists", effect=TaintEffect.NO_SCHEDULE),
        Toleration(key="dedicated", value="ml"),
    )
    assert gpu.topology_preferred == "topology.kubernetes.io/rack"
    assert gpu.topology_required is None
    (cpu,) = job_for(manifest("job-cpu")).pod_sets()
    assert cpu.min_count == 2


def test_workload_from_a_job() -> None:
    w = job_for(manifest("job-gpu")).workload()
    assert (w.namespace, w.name, w.queue) == ("team-a", "pretrain", "default")
    assert w.created_at == 1_740_830_400.0  # 2025-03-01T12:00:00Z
    assert w.max_runtime == 7200.0
    assert w.gpus == 32
    assert job_for(manifest("pytorchjob")).workload(created_at=5.0).max_runtime == 86400.0
    assert job_for(manifest("jobset")).workload(created_at=5.0).max_runtime is None


@pytest.mark.parametrize(
    ("labels", "queue"),
    [
        pytest.param({QUEUE_LABEL: "default"}, "default", id="labelled"),
        pytest.param({QUEUE_LABEL: ""}, None, id="empty-value"),
        pytest.param({"app": "x"}, None, id="other-labels"),
        pytest.param(None, None, id="no-labels"),
    ],
)
def test_queue_name(labels: dict[str, str] | None, queue: str | None) -> None:
    obj = manifest("job-cpu")
    obj["metadata"]["labels"] = labels
    assert job_for(obj).queue_name() == queue


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Set a dotted path (``spec.a[0].b``) in a manifest, for the error table."""
    tokens: list[Any] = []
    for part in path.split("."):
        while "[" in part:
            head, _, rest = part.partition("[")
            if head:
                tokens.append(head)
            index, _, part = rest.partition("]")
            tokens.append(int(index))
        if part:
            tokens.append(part)
    here: Any = obj
    for t in tokens[:-1]:
        here = here[t]
    here[tokens[-1]] = value
    return obj


@pytest.mark.parametrize(
    ("name", "path", "value", "message"),
    [
        pytest.param(
            "job-gpu",
            "spec.template.spec.containers[0].resources.requests.cpu",
            "1.2.3",
            "spec.template.spec.containers[0].resources.requests.cpu: bad quantity '1.2.3'",
            id="bad-quantity",
        ),
        pytest.param(
            "job-gpu",
            "spec.template.spec.containers[1].resources.limits",
            {"nvidia.com/gpu": "0.5"},
            "spec.template.spec.containers[1].resources.limits.nvidia.com/gpu: quantity is not"
            " a whole number (only cpu, memory and ephemeral-storage may be fractional): '0.5'",
            id="fractional-gpu",
        ),
        pytest.param(
            "job-gpu",
            "spec.template.spec.initContainers[0].resources.requests.memory",
            "-1Gi",
            "spec.template.spec.initContainers[0].resources.requests.memory: negative quantity",
            id="negative-init-memory",
        ),
        pytest.param(
            "jobset",
            "spec.replicatedJobs[1].template.spec.template.spec.containers[0].resources.limits",
            {"nvidia.com/gpu": "half"},
            "spec.replicatedJobs[1].template.spec.template.spec.containers[0].resources.limits"
            ".nvidia.com/gpu: bad quantity 'half'",
            id="jobset-bad-gpu",
        ),
        pytest.param(
            "pytorchjob",
            "spec.pytorchReplicaSpecs.Worker.replicas",
            "3",
            "spec.pytorchReplicaSpecs.Worker.replicas: expected an integer, got '3'",
            id="pytorch-replicas-string",
        ),
        pytest.param(
            "job-cpu",
            "spec.parallelism",
            0,
            "spec.parallelism: a queued Job must run at least one pod; got 0",
            id="parallelism-zero",
        ),
        pytest.param(
            "job-cpu",
            "metadata.annotations",
            {"queuemgr.io/job-min-parallelism": "9"},
            "metadata.annotations[queuemgr.io/job-min-parallelism]: expected a whole number"
            " from 1 to 5, got '9'",
            id="min-parallelism-above-count",
        ),
        pytest.param(
            "job-gpu",
            "spec.template.spec.tolerations[0].operator",
            "Maybe",
            "spec.template.spec.tolerations[0].operator: expected Equal or Exists, got 'Maybe'",
            id="bad-toleration",
        ),
        pytest.param(
            "jobset",
            "spec.replicatedJobs[1].name",
            "driver",
            "spec.replicatedJobs[1].name: expected a unique, non-empty name, got 'driver'",
            id="jobset-duplicate-name",
        ),
        pytest.param(
            "job-gpu",
            "spec.template.spec.containers[0].resources.requests",
            {"bad name!": "1"},
            "spec.template.spec.containers[0].resources.requests.bad name!: bad resource name",
            id="bad-resource-name",
        ),
        pytest.param(
            "job-gpu",
            "spec.template",
            None,
            "spec.template: required field missing: None",
            id="missing-template",
        ),
    ],
)
def test_bad_manifests_name_the_path(name: str, path: str, value: Any, message: str) -> None:
    job = job_for(_set(manifest(name), path, value))
    with pytest.raises(ManifestError) as error:
        job.pod_sets()
    assert str(error.value).startswith(message)
    assert isinstance(error.value, ValueError)


def test_fractions_of_the_smallest_unit_round_up_as_in_kubernetes() -> None:
    # The API server accepts both; its scheduler counts 1m of cpu and the next whole byte.
    obj = manifest("job-gpu")
    _set(obj, "spec.template.spec.containers[0].resources.requests.memory", "29.8018Gi")
    _set(obj, "spec.template.spec.containers[1].resources.limits.cpu", "0.1m")
    _set(obj, "spec.template.spec.initContainers[0].resources.requests.cpu", "1")
    (ps,) = job_for(obj).pod_sets()
    # trainer 16 + metrics 0.1m -> 1m + log-shipper sidecar 500m
    assert ps.requests[CPU] == 16_501
    # trainer 31999439090.4832 -> ...091 bytes, + metrics 64Mi + log-shipper 256Mi
    assert ps.requests[MEM] == 31_999_439_091 + 64 * MI + 256 * MI


def test_unknown_kind() -> None:
    with pytest.raises(UnknownKind, match="not v1 Pod"):
        job_for({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})


KINDS = ["job-gpu", "job-cpu", "jobset", "pytorchjob", "raycluster", "rayjob"]


@pytest.mark.parametrize("name", KINDS)
def test_suspend_patch_suspends_and_is_idempotent(name: str) -> None:
    obj = manifest(name)
    job = job_for(obj)
    suspended = apply_patch(obj, job.suspend().as_json())
    assert job_for(suspended).is_suspended()
    assert not job_for(suspended).suspend()  # nothing left to change
    assert job_for(suspended).pod_sets() == job.pod_sets()


H100 = Placement(
    cluster_queue="team-a",
    flavor="h100",
    node_labels={"gpu.example.com/model": "h100"},
    pod_sets=(
        PodSetAssignment(pod_set="main", nodes={"n1": 2, "n2": 2}, topology=("rack", "r7")),
        PodSetAssignment(pod_set="workers", nodes={"n1": 8}),
    ),
)
A100 = Placement(
    cluster_queue="team-a", flavor="a100", node_labels={"gpu.example.com/model": "a100"}
)


def _selectors(obj: dict[str, Any]) -> dict[str, dict[str, str]]:
    job = job_for(obj)
    return {ps.name: dict(ps.node_selector) for ps in job.pod_sets()}


@pytest.mark.parametrize("name", KINDS)
def test_run_with_then_suspend_then_run_elsewhere(name: str) -> None:
    original = apply_patch(manifest(name), job_for(manifest(name)).suspend().as_json())
    before = _selectors(original)

    running = apply_patch(original, job_for(original).run_with(H100).as_json())
    job = job_for(running)
    assert not job.is_suspended()
    for ps, selector in _selectors(running).items():
        if name == "rayjob" and ps == "submitter":
            assert selector == {}  # KubeRay's default submitter: no template to pin
            continue
        expected = {**before[ps], "gpu.example.com/model": "h100"}
        if ps == "main":
            expected["rack"] = "r7"  # the topology domain the scheduler chose
        assert selector == expected
    notes = running["metadata"]["annotations"]
    assert json.loads(notes[ORIGINAL_SELECTORS_ANNOTATION]) == before
    recorded = json.loads(notes[PLACEMENT_ANNOTATION])
    assert recorded["flavor"] == "h100" and recorded["clusterQueue"] == "team-a"
    assert not job.run_with(H100)  # applying the same admission again changes nothing

    preempted = apply_patch(running, job.suspend().as_json())
    assert job_for(preempted).is_suspended()
    assert PLACEMENT_ANNOTATION not in preempted["metadata"]["annotations"]

    elsewhere = apply_patch(preempted, job_for(preempted).run_with(A100).as_json())
    for ps, selector in _selectors(elsewhere).items():
        if name == "rayjob" and ps == "submitter":
            continue
        assert selector == {**before[ps], "gpu.example.com/model": "a100"}  # no stale rack
    assert json.loads(elsewhere["metadata"]["annotations"][ORIGINAL_SELECTORS_ANNOTATION]) == before

    # the user's labels, queue and requests are untouched throughout
    def gang(obj: dict[str, Any]) -> list[tuple[str, int, object]]:
        return [(p.name, p.count, p.requests) for p in job_for(obj).pod_sets()]

    assert gang(elsewhere) == gang(original)
    assert job_for(elsewhere).queue_name() == job_for(original).queue_name()


def test_run_with_builds_missing_parents() -> None:
    """A bare PyTorchJob: no annotations, no runPolicy, no nodeSelector anywhere."""
    obj = manifest("pytorchjob")
    del obj["spec"]["runPolicy"]
    patch = job_for(obj).run_with(A100).as_json()
    assert {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": False}} in patch
    running = apply_patch(obj, patch)
    assert running["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["nodeSelector"] == {
        "gpu.example.com/model": "a100"
    }
    assert set(running["metadata"]["annotations"]) == {
        PLACEMENT_ANNOTATION,
        ORIGINAL_SELECTORS_ANNOTATION,
    }


def test_annotation_keys_are_escaped_in_patches() -> None:
    obj = manifest("job-cpu")  # has an annotations map already
    ops = job_for(obj).run_with(A100).as_json()
    paths = {op["path"] for op in ops}
    assert "/metadata/annotations/queuemgr.io~1placement" in paths
    assert "/metadata/annotations/queuemgr.io~1original-node-selectors" in paths
    running = apply_patch(obj, ops)
    assert running["metadata"]["annotations"]["queuemgr.io/job-min-parallelism"] == "2"


def _with_conditions(name: str, conditions: list[dict[str, str]]) -> dict[str, Any]:
    obj = manifest(name)
    obj["status"] = {"conditions": conditions}
    return obj


@pytest.mark.parametrize(
    ("name", "conditions", "expected"),
    [
        pytest.param("job-gpu", [], None, id="job-no-conditions"),
        pytest.param(
            "job-gpu",
            [{"type": "Suspended", "status": "True"}, {"type": "Complete", "status": "True"}],
            Finished(succeeded=True),
            id="job-complete",
        ),
        pytest.param(
            "job-gpu",
            [
                {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"},
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "DeadlineExceeded",
                    "message": "Job was active longer than specified deadline",
                },
            ],
            Finished(
                succeeded=False,
                reason="DeadlineExceeded",
                message="Job was active longer than specified deadline",
            ),
            id="job-failed",
        ),
        pytest.param(
            "job-gpu", [{"type": "Complete", "status": "False"}], None, id="job-complete-false"
        ),
        pytest.param(
            "jobset",
            [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}],
            Finished(succeeded=True, reason="AllJobsCompleted"),
            id="jobset-completed",
        ),
        pytest.param(
            "jobset",
            [{"type": "Failed", "status": "True", "reason": "FailurePolicyMaxRestarts"}],
            Finished(succeeded=False, reason="FailurePolicyMaxRestarts"),
            id="jobset-failed",
        ),
        pytest.param(
            "jobset", [{"type": "Complete", "status": "True"}], None, id="jobset-ignores-job-type"
        ),
        pytest.param(
            "pytorchjob",
            [{"type": "Running", "status": "True"}, {"type": "Succeeded", "status": "True"}],
            Finished(succeeded=True),
            id="pytorchjob-succeeded",
        ),
        pytest.param(
            "pytorchjob",
            [{"type": "Failed", "status": "True", "message": "worker-2 OOMKilled"}],
            Finished(succeeded=False, message="worker-2 OOMKilled"),
            id="pytorchjob-failed",
        ),
    ],
)
def test_finished(name: str, conditions: list[dict[str, str]], expected: Finished | None) -> None:
    assert job_for(_with_conditions(name, conditions)).finished() == expected


def test_placement_of_a_core_admission_pins_a_single_topology_domain() -> None:
    job = job_for(manifest("job-gpu"))
    (ps,) = job.pod_sets()
    nodes = {NodeName("n1"): {"topology.kubernetes.io/rack": "r1"}}
    nodes[NodeName("n2")] = {"topology.kubernetes.io/rack": "r1"}
    nodes[NodeName("n3")] = {"topology.kubernetes.io/rack": "r2"}
    flavor = ResourceFlavor(name=FlavorName("h100"), node_labels={"gpu": "h100"})

    def admission(*placed: tuple[str, int]) -> Admission:
        return Admission(
            workload=WorkloadId("team-a/pretrain"),
            cluster_queue=ClusterQueueName("team-a"),
            flavor=flavor.name,
            placements=tuple(
                PodSetPlacement(pod_set="main", node=NodeName(n), count=c) for n, c in placed
            ),
        )

    one = Placement.of(admission(("n1", 2), ("n2", 2)), flavor, [ps], nodes)
    assert one.pod_sets[0].topology == ("topology.kubernetes.io/rack", "r1")
    assert one.node_labels == {"gpu": "h100"} and one.cluster_queue == "team-a"
    spread = Placement.of(admission(("n1", 2), ("n3", 2)), flavor, [ps], nodes)
    assert spread.pod_sets[0].topology is None
    assert dict(spread.pod_sets[0].nodes) == {"n1": 2, "n3": 2}


@pytest.mark.parametrize("name", KINDS)
def test_a_running_job_names_its_admission_and_a_stopped_one_does_not(name: str) -> None:
    original = apply_patch(manifest(name), job_for(manifest(name)).suspend().as_json())
    admitted = dataclasses.replace(H100, admitted_at=1_700_000_123.456789)
    running = apply_patch(original, job_for(original).run_with(admitted).as_json())
    note = running["metadata"]["annotations"][PLACEMENT_ANNOTATION]
    assert recorded_admission(note) == 1_700_000_123.456789
    stopped = apply_patch(running, job_for(running).suspend().as_json())
    assert PLACEMENT_ANNOTATION not in stopped["metadata"].get("annotations", {})


@pytest.mark.parametrize(
    "note",
    [None, "", "not json", "[]", '{"admittedAt": "soon"}', '{"admittedAt": true}', "{}"],
    ids=["absent", "empty", "bad-json", "a-list", "a-string", "a-bool", "unnamed"],
)
def test_an_unreadable_admission_note_names_no_admission(note: str | None) -> None:
    assert recorded_admission(note) is None
