"""The kustomize base in manifests/: it renders, every object is valid Kubernetes, and
the pieces agree with each other and with the code.

``kubectl kustomize manifests`` runs the kubectl the control plane harness builds
(tests/controlplane/build.py); without it and without Go, the rendering tests are
skipped, saying so. Every rendered object, the examples and the database upgrade Job
are validated against the Kubernetes JSON schemas of the harness's version (strictly:
an unknown field is an error) with ``kubernetes-validate``. The objects of CRDs the
schemas don't know (JobSet, PyTorchJob) are read by queuemgr's own job parser.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from queuemgr.cli.apply import load_queues_file
from queuemgr.controller.webhook_section import WebhookConfig, load_webhook_config
from queuemgr.core.model import CohortName, FlavorName, Node, NodeName
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.certs import service_dns_names
from queuemgr.k8s.jobs import KINDS, QUEUE_LABEL, job_for
from queuemgr.k8s.rules import WebhookSettings, queue_problems
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.k8s.testing import InMemoryDirectory
from queuemgr.k8s.webhook_registration import service_client_config, webhook_configurations
from queuemgr.service.settings import BACKENDS, load_config
from tests.controlplane import build

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
EXAMPLES = MANIFESTS / "examples"
APPLY_FILES = ("queues.yaml", "org-tree.yaml")
SERVE = MANIFESTS / "base" / "serve.yaml"
NAMESPACE = "queuemgr-system"
SERVICE_ACCOUNT = "queuemgr"


def kubectl_binary() -> Path:
    """The harness's kubectl, built when missing and Go is there; else skip."""
    if not build.is_built() and build.go_command() is None:
        pytest.skip(
            "rendering manifests/ needs the harness's kubectl, built from source with Go"
            " (`python -m tests.controlplane.build`); no `go` on PATH"
        )
    try:
        return build.ensure_built().kubectl
    except build.BuildError as error:
        pytest.fail(f"could not build kubectl: {error}", pytrace=False)


def kustomize(directory: Path = MANIFESTS) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(kubectl_binary()), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def schema_version() -> str:
    """The harness's Kubernetes version, or the newest kubernetes-validate knows if older."""
    wanted = build.KUBERNETES_VERSION.lstrip("v")
    latest = kubernetes_validate.latest_version()
    return wanted if _minor(wanted) <= _minor(latest) else latest


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def webhook_section(env: dict[str, str] | None = None) -> WebhookConfig:
    """serve.yaml's ``webhook`` section, as ``queuemgr serve`` reads it."""
    raw = yaml.safe_load(SERVE.read_text())
    return load_webhook_config(raw["webhook"], env or {}, SERVE.parent)


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def validate(obj: dict[str, Any]) -> None:
    name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    try:
        kubernetes_validate.validate(obj, schema_version(), strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(p) for p in error.path)
        pytest.fail(f"{name} is not valid Kubernetes {schema_version()}: {path}: {error.message}")


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return kustomize()


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(objects, "Deployment", "queuemgr")["spec"]["template"]["spec"]
    assert len(pod["containers"]) == 1
    return dict(pod["containers"][0])


def examples() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        if path.name in APPLY_FILES:
            continue  # a queuemgr apply file, not Kubernetes objects
        for obj in load_all(path):
            yield path, obj


# -- rendering and schemas ----------------------------------------------------------


def test_every_rendered_object_is_valid_kubernetes(rendered: list[dict[str, Any]]) -> None:
    kinds = sorted({o["kind"] for o in rendered})
    assert kinds == sorted(
        {
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Secret",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        }
    )
    for obj in rendered:
        validate(obj)
        if obj["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding") and not obj[
            "kind"
        ].endswith("WebhookConfiguration"):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]


def test_a_typo_fails_validation() -> None:
    """The strict schemas catch a misspelt field: the validation above means something."""
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "x"},
                "spec": {"minAvailible": 1},
            },
            schema_version(),
            strict=True,
        )


def test_examples_and_the_upgrade_job_are_valid() -> None:
    custom = {(f"{k.GROUP}/{k.VERSION}", k.KIND) for k in KINDS if k.GROUP != "batch"}
    objects = [obj for _, obj in examples()]
    objects += load_all(MANIFESTS / "jobs" / "db-upgrade.yaml")
    crds = 0
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in custom:
            crds += 1  # no schema for CRDs: queuemgr's own parser reads them below
        else:
            validate(obj)
    assert crds == 4  # JobSet, PyTorchJob, RayJob, RayCluster


# -- the pieces agree ---------------------------------------------------------------


def test_webhook_configurations_are_what_the_code_builds(rendered: list[dict[str, Any]]) -> None:
    config = webhook_section()
    service = one(rendered, "Service", config.service)
    mutating, validating = webhook_configurations(
        mutate_client=service_client_config(config.service, NAMESPACE, "/mutate"),
        validate_client=service_client_config(config.service, NAMESPACE, "/validate"),
        namespace_selector=config.managed_namespaces,
        mutating_name=config.mutating_configuration,
        validating_name=config.validating_configuration,
    )
    assert one(rendered, "MutatingWebhookConfiguration") == mutating
    assert one(rendered, "ValidatingWebhookConfiguration") == validating
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]


def test_the_service_configuration(rendered: list[dict[str, Any]]) -> None:
    if "kubernetes" not in BACKENDS:
        pytest.skip("serve.yaml needs `backend: kubernetes`, which this checkout lacks")
    serve = load_config(SERVE, env={})
    webhook = serve.webhook
    assert webhook == webhook_section()
    assert serve.backend == "kubernetes"
    assert webhook.enabled and webhook.self_signed and webhook.patch_ca_bundle
    assert webhook.managed_namespaces == LabelSelector.parse("queuemgr.io/managed=true")
    kube = getattr(serve, "kubernetes", None)
    if kube is not None:  # the controller's selector is the same
        assert LabelSelector.parse(kube.managed_namespaces) == webhook.managed_namespaces

    # The ConfigMap the Deployment mounts holds serve.yaml as it is.
    pod = one(rendered, "Deployment", "queuemgr")["spec"]["template"]["spec"]
    config_map = one(rendered, "ConfigMap", pod["volumes"][0]["configMap"]["name"])
    assert config_map["data"]["serve.yaml"] == SERVE.read_text()
    main = container(rendered)
    assert main["args"] == ["serve", "--config", "/etc/queuemgr/serve.yaml"]
    assert {"name": "config", "mountPath": "/etc/queuemgr", "readOnly": True} in main[
        "volumeMounts"
    ]

    # Ports: the configuration's, the container's and the Services' agree.
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {"http-metrics": serve.http_port, "webhook": webhook.port}
    assert (serve.http_host, webhook.host) == ("0.0.0.0", "0.0.0.0")
    metrics = one(rendered, "Service", "queuemgr-metrics")
    assert metrics["spec"]["ports"][0]["targetPort"] == "http-metrics"

    # The webhook's namespace and the replica's name come from the pod.
    env = {e["name"]: e for e in main["env"]}
    assert env["QUEUEMGR_WEBHOOK_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.namespace"
    )
    assert env["QUEUEMGR_REPLICA"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_the_deployment(rendered: list[dict[str, Any]]) -> None:
    deployment = one(rendered, "Deployment", "queuemgr")
    labels = deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["metadata"]["labels"] == labels
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    main = container(rendered)

    # The database URL from the Secret, which has that key.
    env = {e["name"]: e for e in main["env"]}
    ref = env["QUEUEMGR_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    secret = one(rendered, "Secret", ref["name"])
    assert ref["key"] in secret["stringData"]
    assert "example" in (MANIFESTS / "base" / "database-secret.yaml").read_text().lower()

    # Requests and limits for both resources; probes on /healthz and /readyz.
    for kind in ("requests", "limits"):
        assert set(main["resources"][kind]) == {"cpu", "memory"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert main["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert main["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "webhook",
        "scheme": "HTTPS",
    }

    # The PDB and both Services select exactly these pods.
    pdb = one(rendered, "PodDisruptionBudget", "queuemgr")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": labels}}
    for service in (o for o in rendered if o["kind"] == "Service"):
        assert service["spec"]["selector"] == labels

    binding = one(rendered, "ClusterRoleBinding", "queuemgr")
    assert (
        binding["roleRef"]["name"] == one(rendered, "ClusterRole", "queuemgr")["metadata"]["name"]
    )
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
    ]


# What the controller and the webhook need, and nothing else (docs/kubernetes.md).
EXPECTED_RULES = {
    ("batch", "jobs", ""): {"get", "list", "watch", "patch", "update"},
    ("batch", "jobs/status", ""): {"patch", "update"},
    ("jobset.x-k8s.io", "jobsets", ""): {"get", "list", "watch", "patch", "update"},
    ("jobset.x-k8s.io", "jobsets/status", ""): {"patch", "update"},
    ("kubeflow.org", "pytorchjobs", ""): {"get", "list", "watch", "patch", "update"},
    ("kubeflow.org", "pytorchjobs/status", ""): {"patch", "update"},
    ("ray.io", "rayjobs", ""): {"get", "list", "watch", "patch", "update"},
    ("ray.io", "rayjobs/status", ""): {"patch", "update"},
    ("ray.io", "rayclusters", ""): {"get", "list", "watch", "patch", "update"},
    ("ray.io", "rayclusters/status", ""): {"patch", "update"},
    ("", "pods", ""): {"get", "list", "watch"},
    ("", "nodes", ""): {"get", "list", "watch"},
    ("", "namespaces", ""): {"get", "list", "watch"},
    ("scheduling.k8s.io", "priorityclasses", ""): {"list", "watch"},
    ("resource.k8s.io", "resourceclaimtemplates", ""): {"list", "watch"},
    ("resource.k8s.io", "resourceslices", ""): {"list", "watch"},
    ("autoscaling.x-k8s.io", "provisioningrequests", ""): {"create", "get", "list", "delete"},
    ("", "podtemplates", ""): {"create", "get", "list", "delete"},
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "queuemgr-mutating",
    ): {"get", "patch"},
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "queuemgr-validating",
    ): {"get", "patch"},
    ("", "events", ""): {"create", "patch"},
}


def granted(role: dict[str, Any]) -> dict[tuple[str, str, str], set[str]]:
    """(group, resource, name) -> verbs, one entry per combination a rule lists."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule
        names = rule.get("resourceNames") or [""]
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for name in names:
                    out.setdefault((group, resource, name), set()).update(rule["verbs"])
    return out


def test_the_cluster_role_is_least_privilege(rendered: list[dict[str, Any]]) -> None:
    role = one(rendered, "ClusterRole", "queuemgr")
    assert granted(role) == EXPECTED_RULES
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "*" not in rule["apiGroups"]
    # Every verb is explained in the source file.
    source = (MANIFESTS / "base" / "rbac.yaml").read_text()
    for verb in ("get", "list", "watch", "patch", "update", "create"):
        assert f"- {verb} " in source or f"- {verb}\n" in source or f'"{verb}"' in source
    # The names it may patch are the configurations' and the service's.
    serve = webhook_section()
    assert {serve.mutating_configuration, serve.validating_configuration} == {
        one(rendered, "MutatingWebhookConfiguration")["metadata"]["name"],
        one(rendered, "ValidatingWebhookConfiguration")["metadata"]["name"],
    }


# -- the examples -------------------------------------------------------------------


def test_example_namespaces_are_managed() -> None:
    serve = webhook_section()
    namespaces = [o for o in load_all(EXAMPLES / "namespaces.yaml")]
    assert sorted(n["metadata"]["name"] for n in namespaces) == ["team-a", "team-b"]
    for namespace in namespaces:
        assert serve.managed_namespaces.matches(namespace["metadata"]["labels"])


def test_example_jobs_pass_the_webhook_against_the_example_queues() -> None:
    """Each example job names a queue of queues.yaml that admits its namespace, and fits
    an 8-GPU H100 node of the example flavor."""
    config = load_queues_file(EXAMPLES / "queues.yaml")
    (flavor,) = config.flavors.values()
    gpu, cpu, mem = (ResourceName(r) for r in ("nvidia.com/gpu", "cpu", "memory"))
    node = Node(
        name=NodeName("gpu-node-0"),
        labels=dict(flavor.node_labels),
        allocatable={gpu: 8, cpu: 96_000, mem: 2 * 2**40},
    )
    directory = InMemoryDirectory(
        flavors=config.flavors.values(),
        nodes=[node],
        cluster_queues=config.cluster_queues.values(),
        local_queues=config.local_queues.values(),
    )
    seen = set()
    for path, obj in examples():
        if obj["kind"] == "Namespace":
            continue
        job = job_for(obj)
        seen.add(obj["kind"])
        queue = job.queue_name()
        assert queue is not None, f"{path.name}: no {QUEUE_LABEL} label"
        assert job.is_suspended(), f"{path.name}: not created suspended"
        problems = queue_problems(
            namespace=obj["metadata"]["namespace"],
            queue=queue,
            pod_sets=job.pod_sets(),
            directory=directory,
            settings=WebhookSettings(),
        )
        assert problems == [], f"{path.name}: {problems}"
    assert seen == {"Job", "JobSet", "PyTorchJob", "RayJob", "RayCluster"}


# -- the cert-manager variant -------------------------------------------------------


def test_the_cert_manager_variant(tmp_path: Path) -> None:
    objects = kustomize(MANIFESTS / "cert-manager")
    for obj in objects:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            continue  # a CRD: checked by hand below
        validate(obj)
    certificate = one(objects, "Certificate", "queuemgr-webhook")
    issuer = one(objects, "Issuer", certificate["spec"]["issuerRef"]["name"])
    assert issuer["metadata"]["namespace"] == NAMESPACE
    serve = webhook_section()
    assert certificate["spec"]["dnsNames"] == list(service_dns_names(serve.service, NAMESPACE))

    # Every replica mounts the Secret cert-manager writes, and serves it.
    main = container(objects)
    pod = one(objects, "Deployment", "queuemgr")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in main["volumeMounts"]}
    assert volumes["webhook-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["QUEUEMGR_WEBHOOK_CERT_DIR"] == mounts["webhook-tls"]["mountPath"]
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (tmp_path / name).write_text("PEM\n")
    overrides = {k: v for k, v in env.items() if k.startswith("QUEUEMGR_WEBHOOK_") and v}
    config = webhook_section({**overrides, "QUEUEMGR_WEBHOOK_CERT_DIR": str(tmp_path)})
    assert config.enabled and not config.self_signed and not config.patch_ca_bundle

    # The CA injector fills in caBundle; otherwise the configurations are the base's.
    base = kustomize(MANIFESTS / "base")
    inject = f"{NAMESPACE}/{certificate['metadata']['name']}"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        patched = one(objects, kind)
        assert patched["metadata"].pop("annotations") == {"cert-manager.io/inject-ca-from": inject}
        assert patched == one(base, kind)


def test_the_org_tree_example_is_a_three_level_tree_of_eight_teams() -> None:
    config = load_queues_file(EXAMPLES / "org-tree.yaml")
    tree = config.quota_topology.tree
    assert len(config.cluster_queues) == 8
    paths = {q.name: tree.path(q.cohort) for q in config.cluster_queues.values() if q.cohort}
    assert paths["ads-b"] == "org/product/ads" and paths["vision-a"] == "org/research/vision"
    assert max(tree.depth(c) for c in config.cohorts) == 2  # three levels of cohorts
    # product keeps 8 of its 32 home: the root's pool is org's 24, research's 32, product's 24.
    topo = config.quota_topology
    gpu = ResourceName("nvidia.com/gpu")
    assert topo.pool[CohortName("org")][(FlavorName("h100"), gpu)] == 24 + 32 + 24
