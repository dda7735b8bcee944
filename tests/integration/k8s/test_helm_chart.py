"""The Helm chart installed for real into the integration tests' kube-apiserver.

``helm install --create-namespace`` (the helm tests/helm/build.py builds) puts the chart
into a fresh namespace of the harness's control plane, with a database URL and a
cluster's kubeconfig Secret set. Then every object ``helm template`` renders for the
same values is there, as rendered (each rendered field is in the live object: the
apiserver only adds defaults); the Deployment's controller makes its ReplicaSet and
the two pods (which never run: there is no kubelet); the ServiceAccount, bound in the
release's namespace, may do what the ClusterRole grants and nothing else that was
sampled. ``helm upgrade --reuse-values --set replicas=1`` scales the Deployment and
drops the PodDisruptionBudget, and ``helm uninstall`` removes every object, the
cluster-scoped ones too.

It is one test, install to uninstall, because the chart's ClusterRole and webhook
configurations have fixed names: a second release could not be installed beside it.
While it runs the webhook configurations are real: with failurePolicy Fail they refuse
labelled jobs in namespaces labelled queuemgr.io/managed=true, which no other test of
this worker creates meanwhile (a worker runs one test at a time).
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from tests.controlplane.harness import ControlPlane, wait_for
from tests.unit.test_helm_chart import CHART, RELEASE, make_helm, values_file

pytestmark = [pytest.mark.integration]

URL = "postgresql://scheduler:not-a-secret@postgres.database.svc:5432/queuemgr"
VALUES = {
    "database": {"url": URL},
    "clusters": [{"name": "gpu-east", "secretName": "gpu-east-kubeconfig"}],
}


def contains(live: Any, want: Any, path: str = "") -> list[str]:
    """Where ``live`` lacks or changes what ``want`` sets (the apiserver adds defaults)."""
    if isinstance(want, dict):
        if not isinstance(live, dict):
            return [f"{path}: {live!r} is not a mapping"]
        return [p for k, v in want.items() for p in contains(live.get(k), v, f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(live, list) or len(live) != len(want):
            return [f"{path}: {live!r} is not a list of {len(want)}"]
        return [
            p
            for i, (a, b) in enumerate(zip(live, want, strict=True))
            for p in contains(a, b, f"{path}[{i}]")
        ]
    return [] if live == want else [f"{path}: {live!r} != {want!r}"]


def live_object(resources: Any, obj: dict[str, Any]) -> dict[str, Any] | None:
    api = resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    metadata = obj["metadata"]
    try:
        found = api.get(name=metadata["name"], namespace=metadata.get("namespace"))
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return dict(found.to_dict())


def as_written(obj: dict[str, Any]) -> dict[str, Any]:
    """What the apiserver keeps of a rendered object: a Secret's stringData as data."""
    if obj["kind"] != "Secret" or "stringData" not in obj:
        return obj
    out = {k: v for k, v in obj.items() if k != "stringData"}
    out["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in obj["stringData"].items()}
    return out


def can_i(control_plane: ControlPlane, identity: str, verb: str, *what: str) -> str:
    out = control_plane.kubectl("auth", "can-i", verb, *what, f"--as={identity}", check=False)
    return out.strip()


def test_install_upgrade_and_uninstall(control_plane: ControlPlane, tmp_path: Path) -> None:
    helm = make_helm(tmp_path / "helm-home")
    namespace = f"helm-{uuid.uuid4().hex[:8]}"
    kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig())]
    values = ["--values", str(values_file(tmp_path, VALUES))]
    target = [RELEASE, str(CHART), "--namespace", namespace]
    rendered = [doc for doc in yaml.safe_load_all(helm("template", *target, *values)) if doc]
    assert {"Deployment", "ClusterRole", "MutatingWebhookConfiguration"} <= {
        o["kind"] for o in rendered
    }

    installed = False
    try:
        out = helm("install", *target, "--create-namespace", *values, *kubeconfig)
        installed = True
        assert "STATUS: deployed" in out, out
        with control_plane.api_client() as api_client:
            resources = dynamic.DynamicClient(api_client).resources

            # Every object, as rendered, owned by the release.
            for obj in rendered:
                name = f"{obj['kind']}/{obj['metadata']['name']}"
                live = live_object(resources, obj)
                assert live is not None, f"{name} was not created"
                assert contains(live, as_written(obj)) == [], name
                annotations = live["metadata"]["annotations"]
                assert annotations["meta.helm.sh/release-name"] == RELEASE, name
                assert annotations["meta.helm.sh/release-namespace"] == namespace, name
                if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding") and not obj[
                    "kind"
                ].endswith("WebhookConfiguration"):
                    assert live["metadata"]["namespace"] == namespace, name

            # The Deployment's controller accepts the pod template: two pods, each
            # with the cluster's kubeconfig volume.
            core = client.CoreV1Api(api_client)
            selector = "app.kubernetes.io/name=queuemgr,app.kubernetes.io/component=manager"

            def pods() -> list[Any]:
                found = core.list_namespaced_pod(namespace, label_selector=selector).items
                return list(found) if len(found) == 2 else []

            for pod in wait_for(pods, timeout=60, what="the Deployment's two pods"):
                volumes = {v.name: v for v in pod.spec.volumes}
                assert volumes["cluster-gpu-east"].secret.secret_name == "gpu-east-kubeconfig"

        # The ServiceAccount of this namespace has the ClusterRole.
        identity = f"system:serviceaccount:{namespace}:queuemgr"
        webhook = "mutatingwebhookconfigurations.admissionregistration.k8s.io/queuemgr-mutating"
        assert can_i(control_plane, identity, "patch", webhook) == "yes"
        assert can_i(control_plane, identity, "watch", "jobs.batch", "-A") == "yes"
        assert can_i(control_plane, identity, "list", "secrets", "-A") == "no"
        assert can_i(control_plane, identity, "delete", "pods", "-n", namespace) == "no"

        # An upgrade to one replica: no PodDisruptionBudget.
        helm("upgrade", *target, "--reuse-values", "--set", "replicas=1", *kubeconfig)
        with control_plane.api_client() as api_client:
            resources = dynamic.DynamicClient(api_client).resources
            deployment = next(o for o in rendered if o["kind"] == "Deployment")
            pdb = next(o for o in rendered if o["kind"] == "PodDisruptionBudget")
            live = live_object(resources, deployment)
            assert live is not None and live["spec"]["replicas"] == 1
            assert live_object(resources, pdb) is None
            secret = next(o for o in rendered if o["kind"] == "Secret")
            live = live_object(resources, secret)
            assert live is not None and contains(live, as_written(secret)) == []  # reused

        helm("uninstall", RELEASE, "--namespace", namespace, *kubeconfig)
        installed = False
        with control_plane.api_client() as api_client:
            resources = dynamic.DynamicClient(api_client).resources
            left = [
                f"{o['kind']}/{o['metadata']['name']}"
                for o in rendered
                if live_object(resources, o) is not None
            ]
            assert left == [], f"left after helm uninstall: {left}"
    finally:
        if installed:
            helm("uninstall", RELEASE, "--namespace", namespace, *kubeconfig, check=False)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
