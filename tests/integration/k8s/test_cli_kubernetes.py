"""The tenant commands in Kubernetes mode, against the real apiserver with a tenant's own RBAC.

A ServiceAccount of namespace A, bound to a Role that may create, read and
delete Jobs in A only, runs ``queuemgr submit|list|status|why|cancel`` with
its own kubeconfig (``QUEUEMGR_KUBECONFIG``) and no database at all. Kubernetes
RBAC, not queuemgr, keeps it out of namespace B.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result
from kubernetes import client

from queuemgr.cli.main import main
from tests.controlplane.harness import ControlPlane

pytestmark = pytest.mark.integration


@pytest.fixture
def tenant(control_plane: ControlPlane, tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """(own namespace, other namespace, kubeconfig of a tenant of the first)."""
    own, other = (f"team-{uuid.uuid4().hex[:8]}" for _ in range(2))
    with control_plane.api_client() as api:
        core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
        for ns in (own, other):
            core.create_namespace({"metadata": {"name": ns}})
        rbac.create_namespaced_role(
            own,
            {
                "metadata": {"name": "queue-user"},
                "rules": [
                    {
                        "apiGroups": ["batch"],
                        "resources": ["jobs"],
                        "verbs": ["create", "get", "list", "delete"],
                    }
                ],
            },
        )
        rbac.create_namespaced_role_binding(
            own,
            {
                "metadata": {"name": "queue-user"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "queue-user",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": own}],
            },
        )
        token = control_plane.service_account_token(own, "alice")
        kubeconfig = tmp_path / "alice.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {
                                "server": control_plane.url,
                                "certificate-authority": str(control_plane.ca_file),
                            },
                        }
                    ],
                    "users": [{"name": "alice", "user": {"token": token}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "alice"}}],
                    "current-context": "c",
                }
            )
        )
        yield own, other, kubeconfig
        for ns in (own, other):
            core.delete_namespace(ns)


def _cli(kubeconfig: Path, *args: str) -> Result:
    # No database URL at all: Kubernetes mode must not need one.
    env = {"QUEUEMGR_KUBECONFIG": str(kubeconfig), "QUEUEMGR_DATABASE_URL": ""}
    return CliRunner().invoke(main, list(args), env=env)


def test_a_tenant_submits_lists_asks_and_cancels_in_its_own_namespace(
    tenant: tuple[str, str, Path], tmp_path: Path
) -> None:
    own, _, kubeconfig = tenant
    r = _cli(kubeconfig, "submit", "-q", "default", "-n", own, "--name", "train",
             "--gpus", "8", "--pods", "2", "--image", "busybox", "--max-runtime", "2h",
             "--", "sleep", "60")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert f"job {own}/train submitted to default" in r.output
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "from-file", "labels": {"queuemgr.io/queue-name": "default"}},
                "spec": {
                    "parallelism": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "busybox"}],
                        }
                    },
                },
            }
        )
    )
    r = _cli(kubeconfig, "submit", "-f", str(manifest), "-n", own)
    assert r.exit_code == 0, r.output
    listing = json.loads(_cli(kubeconfig, "list", "-n", own, "-o", "json").output)
    docs = {d["name"]: d for d in listing["workloads"]}
    assert set(docs) == {"train", "from-file"}
    train = docs["train"]
    assert (train["state"], train["local_queue"], train["gpus"]) == ("Pending", "default", 16)
    why = json.loads(_cli(kubeconfig, "why", "train", "-n", own, "-o", "json").output)
    assert why["state"] == "Pending" and why["kind"] == "Job"
    r = _cli(kubeconfig, "cancel", "from-file", "-n", own)
    assert r.exit_code == 0 and "cancelled" in r.output
    missing = _cli(kubeconfig, "status", "trian", "-n", own)
    assert missing.exit_code == 1 and "did you mean 'train'" in missing.output


def test_rbac_keeps_a_tenant_out_of_another_namespace(tenant: tuple[str, str, Path]) -> None:
    _, other, kubeconfig = tenant
    for args in (
        ("list", "-n", other),
        ("submit", "-q", "default", "-n", other, "--image", "busybox", "--", "true"),
        ("list", "-A"),
    ):
        r = _cli(kubeconfig, *args)
        assert r.exit_code == 1, (args, r.output)
        assert "forbidden" in r.output and "Traceback" not in r.output, r.output


def test_bad_manifests_and_kinds_are_usage_errors(
    tenant: tuple[str, str, Path], tmp_path: Path
) -> None:
    own, _, kubeconfig = tenant
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}))
    r = _cli(kubeconfig, "submit", "-f", str(pod), "-n", own)
    assert r.exit_code == 2 and "queuemgr manages" in r.output and "v1 Pod" in r.output
    r = _cli(kubeconfig, "submit", "-q", "default", "-n", own, "--", "true")
    assert r.exit_code == 2 and "--image" in r.output
