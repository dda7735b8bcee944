"""The rendered manifests against the real kube-apiserver: accepted, and RBAC exact.

The namespace, ServiceAccount, ClusterRole and ClusterRoleBinding are created for
real; everything else (``kubectl apply -k manifests``, the database upgrade Job)
goes through a server-side dry run, so the webhook configurations, whose
``failurePolicy: Fail`` would refuse labelled jobs of other tests, never take
effect. Then ``kubectl auth can-i --as`` the ServiceAccount: every verb the
controller and the webhook need is allowed, and a sample of what they don't need
is not. The examples are created (dry run) in a test namespace, JobSet and
PyTorchJob through their test CRDs.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic

from queuemgr.k8s.apiserver import ApiNamespaceLabels, trust_ca
from queuemgr.k8s.certs import generate, service_dns_names
from tests.controlplane.harness import ControlPlane
from tests.integration.k8s.crds import install_job_crds
from tests.unit.test_manifests import (
    EXAMPLES,
    MANIFESTS,
    NAMESPACE,
    SERVICE_ACCOUNT,
    examples,
    kustomize,
)

pytestmark = [pytest.mark.integration]

IDENTITY = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
REAL = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")


@pytest.fixture(scope="module")
def installed(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[dict[str, Any]]]:
    """The identity objects created for real (removed afterwards); yields the rendering."""
    rendered = kustomize()
    with control_plane.api_client() as api_client:
        install_job_crds(api_client)  # kubectl auth can-i resolves resources by discovery
    path = tmp_path_factory.mktemp("manifests") / "identity.yaml"
    path.write_text(yaml.safe_dump_all([o for o in rendered if o["kind"] in REAL]))
    control_plane.kubectl("apply", "--server-side", "-f", str(path))
    try:
        yield rendered
    finally:
        control_plane.kubectl("delete", "--wait=false", "--ignore-not-found", "-f", str(path))


def test_kubectl_apply_k_is_accepted(
    control_plane: ControlPlane, installed: list[dict[str, Any]]
) -> None:
    out = control_plane.kubectl("apply", "-k", str(MANIFESTS), "--dry-run=server")
    for obj in installed:
        kind = obj["kind"].lower()
        assert f"{kind}/{obj['metadata']['name']}" in out.replace(".apps", "").replace(
            ".policy", ""
        ).replace(".admissionregistration.k8s.io", "").replace(".rbac.authorization.k8s.io", ""), (
            out
        )
    upgrade = control_plane.kubectl(
        "create", "--dry-run=server", "-f", str(MANIFESTS / "jobs" / "db-upgrade.yaml")
    )
    assert "job.batch/queuemgr-db-upgrade-" in upgrade


# (verb, resource, extra kubectl arguments): what queuemgr needs ...
ALLOWED = [
    *(
        (verb, resource, ["-A"])
        for resource in ("jobs.batch", "jobsets.jobset.x-k8s.io", "pytorchjobs.kubeflow.org")
        for verb in ("get", "list", "watch", "patch", "update")
    ),
    *(
        (verb, resource, ["-n", "team-a", "--subresource=status"])
        for resource in ("jobs.batch", "jobsets.jobset.x-k8s.io", "pytorchjobs.kubeflow.org")
        for verb in ("patch", "update")
    ),
    *((verb, "pods", ["-A"]) for verb in ("get", "list", "watch")),
    *((verb, "nodes", []) for verb in ("get", "list", "watch")),
    *((verb, "namespaces", []) for verb in ("get", "list", "watch")),
    *((verb, "priorityclasses.scheduling.k8s.io", []) for verb in ("list", "watch")),
    *(
        (verb, f"{kind}.admissionregistration.k8s.io/queuemgr-{name}", [])
        for kind, name in (
            ("mutatingwebhookconfigurations", "mutating"),
            ("validatingwebhookconfigurations", "validating"),
        )
        for verb in ("get", "patch")
    ),
    *((verb, "events", ["-n", "team-a"]) for verb in ("create", "patch")),
]
# ... and a sample of what it must not do.
DENIED = [
    ("list", "secrets", ["-A"]),
    ("get", "secrets", ["-n", NAMESPACE]),
    ("get", "configmaps", ["-n", NAMESPACE]),
    ("create", "pods", ["-n", "team-a"]),
    ("delete", "pods", ["-n", "team-a"]),
    ("create", "pods", ["-n", "team-a", "--subresource=eviction"]),
    ("create", "jobs.batch", ["-n", "team-a"]),
    ("delete", "jobs.batch", ["-n", "team-a"]),
    ("delete", "pytorchjobs.kubeflow.org", ["-n", "team-a"]),
    ("patch", "nodes", []),
    ("update", "nodes", ["--subresource=status"]),
    ("patch", "namespaces", []),
    ("create", "priorityclasses.scheduling.k8s.io", []),
    ("list", "mutatingwebhookconfigurations.admissionregistration.k8s.io", []),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/someone-else", []),
    (
        "delete",
        "validatingwebhookconfigurations.admissionregistration.k8s.io/queuemgr-validating",
        [],
    ),
    ("create", "leases.coordination.k8s.io", ["-n", NAMESPACE]),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", []),
    ("impersonate", "serviceaccounts", ["-A"]),
]


def can_i(control_plane: ControlPlane, verb: str, resource: str, extra: list[str]) -> str:
    out = control_plane.kubectl(
        "auth", "can-i", verb, resource, *extra, f"--as={IDENTITY}", check=False
    )
    return out.strip()


@pytest.mark.usefixtures("installed")
def test_the_service_account_can_do_exactly_what_it_needs(control_plane: ControlPlane) -> None:
    checks = [(True, *c) for c in ALLOWED] + [(False, *c) for c in DENIED]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda c: can_i(control_plane, *c[1:]), checks))
    wrong = [
        f"can-i {verb} {resource} {' '.join(extra)}: {answer} (expected {'yes' if want else 'no'})"
        for (want, verb, resource, extra), answer in zip(checks, answers, strict=True)
        if answer != ("yes" if want else "no")
    ]
    assert not wrong, "\n".join(wrong)


def test_the_service_account_patches_the_ca_bundle_and_reapplying_keeps_it(
    control_plane: ControlPlane, installed: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The configurations for real, briefly: they select only namespaces labelled
    queuemgr.io/managed=true, which no other test uses."""
    path = tmp_path / "webhooks.yaml"
    path.write_text(
        yaml.safe_dump_all([o for o in installed if o["kind"].endswith("WebhookConfiguration")])
    )
    control_plane.kubectl("apply", "-f", str(path))
    try:
        token = control_plane.service_account_token(NAMESPACE, SERVICE_ACCOUNT)
        cert = generate(dns_names=service_dns_names("queuemgr-webhook", NAMESPACE))
        with control_plane.api_client(token=token) as as_queuemgr:
            assert trust_ca(as_queuemgr, cert.ca_pem) == 2  # get and patch, by name
            assert trust_ca(as_queuemgr, cert.ca_pem) == 0
            assert ApiNamespaceLabels(as_queuemgr).labels(NAMESPACE) is not None
        control_plane.kubectl("apply", "-f", str(path))  # an upgrade re-applies them
        with control_plane.api_client() as admin:
            assert trust_ca(admin, cert.ca_pem) == 0  # the bundle survived
    finally:
        control_plane.kubectl("delete", "--ignore-not-found", "-f", str(path))


def test_the_examples_are_accepted(k8s_client: client.ApiClient, namespace: str) -> None:
    install_job_crds(k8s_client)
    resources = dynamic.DynamicClient(k8s_client).resources
    kinds = set()
    for path, obj in examples():
        if obj["kind"] == "Namespace":
            continue
        body = copy.deepcopy(obj)
        body["metadata"]["namespace"] = namespace
        api = resources.get(api_version=body["apiVersion"], kind=body["kind"])
        created = api.create(body=body, namespace=namespace, dry_run="All")
        assert created.metadata.name == obj["metadata"]["name"], path
        kinds.add(obj["kind"])
    assert kinds == {"Job", "JobSet", "PyTorchJob", "RayJob", "RayCluster"}
    assert (EXAMPLES / "queues.yaml").exists()


def test_rendering_is_the_documented_command() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "kubernetes.md").read_text()
    assert "kubectl apply -k manifests" in docs
