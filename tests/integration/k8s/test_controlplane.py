"""Smoke tests of the real control plane the Kubernetes integration tests run on."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane import build
from tests.controlplane.harness import ControlPlane, add_gpu_node, set_pod_phase, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def gpu_nodes(k8s_client: client.ApiClient) -> Iterator[tuple[str, list[str]]]:
    """Two fake 8-GPU nodes carrying a label unique to the test; deleted afterwards."""
    pool = f"pool-{uuid.uuid4().hex[:8]}"
    names = [f"{pool}-{i}" for i in range(2)]
    for name in names:
        add_gpu_node(k8s_client, name, gpus=8, labels={"queuemgr.test/pool": pool})
    yield pool, names
    core = client.CoreV1Api(k8s_client)
    for name in names:
        core.delete_node(name)


def test_apiserver_reports_the_pinned_version(
    control_plane: ControlPlane, k8s_client: client.ApiClient
) -> None:
    info = client.VersionApi(k8s_client).get_code()
    assert info.git_version == build.KUBERNETES_VERSION == control_plane.version
    assert control_plane.url.startswith("https://127.0.0.1:")


def test_a_namespace_can_be_created(k8s_client: client.ApiClient, namespace: str) -> None:
    created = client.CoreV1Api(k8s_client).read_namespace(namespace)
    assert created.status.phase == "Active"


def test_fake_gpu_node_is_ready_with_gpus(
    k8s_client: client.ApiClient, gpu_nodes: tuple[str, list[str]]
) -> None:
    _, names = gpu_nodes
    node = client.CoreV1Api(k8s_client).read_node(names[0])
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert node.status.capacity["nvidia.com/gpu"] == "8"
    ready = {c.type: c.status for c in node.status.conditions}["Ready"]
    assert ready == "True"
    assert not node.spec.unschedulable
    assert not node.spec.taints


def test_job_pods_are_created_and_bound_to_gpu_nodes(
    k8s_client: client.ApiClient, namespace: str, gpu_nodes: tuple[str, list[str]]
) -> None:
    pool, names = gpu_nodes
    batch = client.BatchV1Api(k8s_client)
    core = client.CoreV1Api(k8s_client)
    job = {
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"queuemgr.test/pool": pool},
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.invalid/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "6"}},
                        }
                    ],
                }
            },
        },
    }
    batch.create_namespaced_job(namespace, job)

    def bound_pods() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=train").items
        if len(pods) == 2 and all(pod.spec.node_name for pod in pods):
            return pods
        return None

    pods = wait_for(bound_pods, timeout=90, what="2 job pods bound to nodes")
    # 6 GPUs each on 8-GPU nodes: the scheduler must spread them over both nodes.
    assert sorted(pod.spec.node_name for pod in pods) == sorted(names)

    for pod in pods:  # no kubelet: the harness finishes the pods
        set_pod_phase(k8s_client, namespace, pod.metadata.name, "Succeeded")

    def complete() -> bool:
        status = batch.read_namespaced_job_status("train", namespace).status
        return any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])

    wait_for(complete, timeout=60, what="the job to complete")


def test_rbac_is_enforced(control_plane: ControlPlane, namespace: str) -> None:
    with control_plane.api_client(control_plane.token("nobody")) as api_client:
        core = client.CoreV1Api(api_client)
        with pytest.raises(ApiException) as denied:
            core.list_namespaced_pod(namespace)
        assert denied.value.status == 403

        with control_plane.api_client() as admin:
            rbac = client.RbacAuthorizationV1Api(admin)
            rbac.create_namespaced_role(
                namespace,
                {
                    "metadata": {"name": "pod-reader"},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
                },
            )
            rbac.create_namespaced_role_binding(
                namespace,
                {
                    "metadata": {"name": "nobody-reads-pods"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": "pod-reader",
                    },
                    "subjects": [
                        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "nobody"}
                    ],
                },
            )

        def allowed() -> bool:
            try:
                core.list_namespaced_pod(namespace)
            except ApiException as error:
                if error.status == 403:
                    return False
                raise
            return True

        wait_for(allowed, timeout=30, what="the RoleBinding to take effect")
        with pytest.raises(ApiException) as still_denied:
            core.list_namespaced_pod("default")
        assert still_denied.value.status == 403


def test_service_account_tokens_authenticate(control_plane: ControlPlane, namespace: str) -> None:
    token = control_plane.service_account_token(namespace, "robot")
    with control_plane.api_client(token) as api_client:
        review = client.AuthenticationV1Api(api_client).create_self_subject_review({})
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:robot"


def test_apiserver_restart_keeps_the_stored_objects(
    control_plane: ControlPlane, namespace: str
) -> None:
    with control_plane.api_client() as api_client:
        core = client.CoreV1Api(api_client)
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": "kept"}, "data": {"k": "v"}}
        )
    away = control_plane.restart_apiserver()
    assert away < 60
    with control_plane.api_client() as api_client:
        kept = client.CoreV1Api(api_client).read_namespaced_config_map("kept", namespace)
    assert kept.data == {"k": "v"}
