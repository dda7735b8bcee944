"""The Helm chart in manifests/helm/queuemgr: generated from the kustomize sources, and
rendering what they render.

Without helm: the committed chart is exactly what ``manifests/helm/generate.py``
writes, and values.yaml's defaults are the base's. With the helm binary
``tests/helm/build.py`` builds (once, cached outside the repository; skipped, saying
so, without it and without Go): ``helm lint``, and ``helm template`` with the default
values renders the objects of ``kubectl kustomize manifests`` but for the documented
differences (``as_kustomize``), with ``webhook.certManager.enabled`` those of
``manifests/cert-manager``, and each value does what values.yaml says. Every rendered
object of a Kubernetes kind validates strictly against the harness version's schemas.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from queuemgr.k8s.certs import service_dns_names
from tests.controlplane.build import BuildError, go_command
from tests.helm import build as helm_build
from tests.unit.test_manifests import (
    MANIFESTS,
    NAMESPACE,
    kustomize,
    load_all,
    one,
    validate,
    webhook_section,
)

HELM = MANIFESTS / "helm"
CHART = HELM / "queuemgr"
RELEASE = "queuemgr"
# The labels the chart adds to every object's metadata (templates/_helpers.tpl).
CHART_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)
CHECKSUMS = ("checksum/config", "checksum/database")
CRD_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")


def load_generate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("helm_generate", HELM / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = load_generate()


# -- helm ---------------------------------------------------------------------------


def helm_binary() -> Path:
    """The helm tests/helm/build.py builds, built when missing and Go is there; else skip."""
    if not helm_build.is_built() and go_command() is None:
        pytest.skip(
            f"the chart tests need helm {helm_build.HELM_VERSION}, built from source with Go"
            " (`python -m tests.helm.build`); no `go` on PATH"
        )
    try:
        return helm_build.ensure_built()
    except BuildError as error:
        pytest.fail(f"could not build helm: {error}", pytrace=False)


Helm = Callable[..., str]


def make_helm(home: Path) -> Helm:
    """``helm(*args)``: run helm with its cache, config and data under ``home``."""
    binary = helm_binary()
    env = {
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
    }

    def run(*args: str, check: bool = True) -> str:
        result = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, env=env, timeout=120
        )
        if check:
            assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}"
            return result.stdout
        return result.stdout + result.stderr

    return run


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return make_helm(tmp_path_factory.mktemp("helm-home"))


def values_file(directory: Path, values: dict[str, Any]) -> Path:
    digest = hashlib.sha256(yaml.safe_dump(values).encode()).hexdigest()[:12]
    path = directory / f"values-{digest}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def template_args(values: dict[str, Any] | None, directory: Path, namespace: str) -> list[str]:
    args = [RELEASE, str(CHART), "--namespace", namespace]
    if values:
        args += ["--values", str(values_file(directory, values))]
    return args


@pytest.fixture(scope="module")
def render(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., list[Any]]:
    """``render(values, namespace=...)``: the objects ``helm template`` renders."""
    directory = tmp_path_factory.mktemp("helm-values")

    def run(values: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> list[Any]:
        out = helm("template", *template_args(values, directory, namespace))
        return [doc for doc in yaml.safe_load_all(out) if doc]

    return run


def refused(helm: Helm, tmp_path: Path, values: dict[str, Any]) -> str:
    """helm template's error for values the chart must refuse."""
    out = helm("template", *template_args(values, tmp_path, NAMESPACE), check=False)
    assert "don't meet the specifications of the schema" in out, f"accepted {values}: {out}"
    return out


# -- the comparison -----------------------------------------------------------------


def as_kustomize(objects: list[Any], config_map: str) -> list[Any]:
    """The chart's objects as kustomize renders them: without the chart's labels and the
    pods' checksum annotations, the configuration ConfigMap under kustomize's hashed
    name ``config_map``. These, and the Namespace kustomize adds, are the differences
    docs/kubernetes.md ("Helm") lists."""
    out = []
    for original in objects:
        obj = copy.deepcopy(original)
        labels = obj["metadata"]["labels"]
        for label in CHART_LABELS:
            assert label in labels, f"{obj['kind']}/{obj['metadata']['name']} lacks {label}"
            del labels[label]
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "queuemgr-config":
            obj["metadata"]["name"] = config_map
        if obj["kind"] == "Deployment":
            pod = obj["spec"]["template"]
            annotations = pod["metadata"].pop("annotations")
            assert set(annotations) <= set(CHECKSUMS) and "checksum/config" in annotations
            for volume in pod["spec"]["volumes"]:
                if volume.get("configMap", {}).get("name") == "queuemgr-config":
                    volume["configMap"]["name"] = config_map
        out.append(obj)
    return out


def by_identity(objects: list[Any]) -> dict[tuple[str, str], Any]:
    found = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(found) == len(objects), "two objects of the same kind and name"
    return found


def assert_same_objects(chart: list[Any], base: list[Any]) -> None:
    config_map = next(
        o["metadata"]["name"]
        for o in base
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("queuemgr-config-")
    )
    base = [o for o in base if o["kind"] != "Namespace"]  # helm install --create-namespace
    mine, theirs = by_identity(as_kustomize(chart, config_map)), by_identity(base)
    assert sorted(mine) == sorted(theirs)
    for key, obj in theirs.items():
        assert mine[key] == obj, f"{key[0]}/{key[1]} differs from the kustomize rendering"


def container(objects: list[Any]) -> dict[str, Any]:
    pod = one(objects, "Deployment", "queuemgr")["spec"]["template"]["spec"]
    (main,) = pod["containers"]
    return dict(main)


def pod_spec(objects: list[Any]) -> dict[str, Any]:
    return dict(one(objects, "Deployment", "queuemgr")["spec"]["template"]["spec"])


def env_of(objects: list[Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container(objects)["env"]}


# -- without helm: one source of truth ----------------------------------------------


def test_the_committed_chart_is_what_generate_writes() -> None:
    assert generate.differences() == [], "run python manifests/helm/generate.py"
    for name in generate.render():
        assert (CHART / name).read_text().startswith(generate.GENERATED_MARK), name
    for name in generate.HAND_WRITTEN:
        assert (CHART / name).is_file(), name
        assert not (CHART / name).read_text().startswith(generate.GENERATED_MARK), name


def test_the_default_values_are_the_bases() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    kustomization = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())
    (image,) = kustomization["images"]
    deployment = one(load_all(MANIFESTS / "base" / "deployment.yaml"), "Deployment")
    (main,) = deployment["spec"]["template"]["spec"]["containers"]
    assert chart["appVersion"] == image["newTag"] and values["image"]["tag"] == ""
    assert values["image"]["repository"] == image["name"] == main["image"]
    assert values["image"]["pullPolicy"] == main["imagePullPolicy"]
    assert values["replicas"] == deployment["spec"]["replicas"]
    assert values["resources"] == main["resources"]
    # As manifests/kustomization.yaml: the dashboards yes, what it lacks no.
    assert values["grafana"]["dashboards"]["enabled"] is True
    assert values["webhook"]["certManager"]["enabled"] is False
    assert values["metrics"]["serviceMonitor"]["enabled"] is False
    assert values["metrics"]["prometheusRule"]["enabled"] is False
    assert values["database"] == {
        "url": "",
        "existingSecret": "",
        "existingSecretKey": "QUEUEMGR_DATABASE_URL",
    }
    assert values["clusters"] == []
    assert "does not read them yet" in (CHART / "values.yaml").read_text()


def test_braces_of_prometheus_and_grafana_are_printed_not_run() -> None:
    assert generate.escape_braces("{{ $labels.x }}") == "{{`{{`}} $labels.x {{`}}`}}"
    assert generate.escape_braces("}}}") == "{{`}}`}}}"


def test_a_source_the_generator_does_not_know_fails_naming_it(tmp_path: Path) -> None:
    source = tmp_path / "deployment.yaml"
    source.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n")
    (doc,) = generate.read_docs(source)
    with pytest.raises(generate.GenerateError, match=r"deployment\.yaml.*labels"):
        doc.find("  labels:")


# -- with helm ------------------------------------------------------------------------


def test_helm_lint(helm: Helm) -> None:
    helm("lint", "--strict", str(CHART))
    everything = (
        "webhook.certManager.enabled=true,metrics.serviceMonitor.enabled=true,"
        "metrics.prometheusRule.enabled=true,replicas=1,database.existingSecret=db,"
        "clusters[0].name=east,clusters[0].secretName=east-kubeconfig"
    )
    helm("lint", "--strict", str(CHART), "--set", everything)


def test_the_defaults_render_the_kustomize_base(render: Callable[..., list[Any]]) -> None:
    assert_same_objects(render(), kustomize())


def test_cert_manager_renders_the_cert_manager_variant(
    render: Callable[..., list[Any]],
) -> None:
    chart = render({"webhook": {"certManager": {"enabled": True}}})
    # manifests/cert-manager leaves out the dashboards; the chart keeps them by default.
    dashboards = one(kustomize(), "ConfigMap", "queuemgr-grafana-dashboards")
    assert_same_objects(chart, [*kustomize(MANIFESTS / "cert-manager"), dashboards])


def test_every_object_of_every_option_is_valid(render: Callable[..., list[Any]]) -> None:
    values: dict[str, Any] = {
        "webhook": {"certManager": {"enabled": True}},
        "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
        "clusters": [{"name": "east", "secretName": "east-kubeconfig"}],
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "podAnnotations": {"example.com/team": "ml-infra"},
        "extraEnv": [{"name": "QUEUEMGR_CYCLE_INTERVAL", "value": "10"}],
    }
    crds = 0
    for obj in render(values):
        if obj["apiVersion"].startswith(CRD_GROUPS):
            crds += 1  # no schemas for CRDs: their shape is checked below
        else:
            validate(obj)
    assert crds == 4  # Issuer, Certificate, ServiceMonitor, PrometheusRule
    objects = render(values)
    pod = pod_spec(objects)
    assert pod["imagePullSecrets"] == values["imagePullSecrets"]
    assert pod["nodeSelector"] == values["nodeSelector"]
    assert pod["tolerations"] == values["tolerations"]
    deployment = one(objects, "Deployment", "queuemgr")
    assert deployment["spec"]["template"]["metadata"]["annotations"]["example.com/team"] == (
        "ml-infra"
    )
    assert env_of(objects)["QUEUEMGR_CYCLE_INTERVAL"] == values["extraEnv"][0]


def test_another_namespace(render: Callable[..., list[Any]]) -> None:
    """Everything that names the namespace names the release's."""
    objects = render({"webhook": {"certManager": {"enabled": True}}}, namespace="gpu-quota")
    for obj in objects:
        if obj["kind"] not in generate.CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "gpu-quota", obj["metadata"]["name"]
    binding = one(objects, "ClusterRoleBinding", "queuemgr")
    assert binding["subjects"][0]["namespace"] == "gpu-quota"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        configuration = one(objects, kind)
        assert configuration["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "gpu-quota/queuemgr-webhook"
        }
        for webhook in configuration["webhooks"]:
            assert webhook["clientConfig"]["service"]["namespace"] == "gpu-quota"
    certificate = one(objects, "Certificate", "queuemgr-webhook")
    service = webhook_section().service
    assert certificate["spec"]["dnsNames"] == list(service_dns_names(service, "gpu-quota"))
    assert "queuemgr-system" not in yaml.safe_dump_all(objects)


def test_image(render: Callable[..., list[Any]]) -> None:
    main = container(render({"image": {"repository": "registry.example.com/queuemgr"}}))
    assert main["image"] == "registry.example.com/queuemgr:0.1.0"
    values = {"image": {"repository": "r/q", "tag": "0.2.0", "pullPolicy": "Always"}}
    main = container(render(values))
    assert (main["image"], main["imagePullPolicy"]) == ("r/q:0.2.0", "Always")
    digest = "sha256:" + "a" * 64
    main = container(render({"image": {"tag": "0.2.0", "digest": digest}}))
    assert main["image"] == f"queuemgr@{digest}"


def test_replicas(render: Callable[..., list[Any]]) -> None:
    objects = render({"replicas": 3})
    assert one(objects, "Deployment", "queuemgr")["spec"]["replicas"] == 3
    one(objects, "PodDisruptionBudget", "queuemgr")
    objects = render({"replicas": 1})
    assert one(objects, "Deployment", "queuemgr")["spec"]["replicas"] == 1
    assert not [o for o in objects if o["kind"] == "PodDisruptionBudget"]


def test_the_database_url(render: Callable[..., list[Any]]) -> None:
    default = one(render(), "Secret", "queuemgr-database")
    assert "CHANGE-ME" in default["stringData"]["QUEUEMGR_DATABASE_URL"]
    assert "queuemgr.io/example" in default["metadata"]["annotations"]

    url = "postgresql://scheduler:s3cret@pg.db.svc:5432/queuemgr?sslmode=require"
    objects = render({"database": {"url": url}})
    secret = one(objects, "Secret", "queuemgr-database")
    assert secret["stringData"] == {"QUEUEMGR_DATABASE_URL": url}
    assert "annotations" not in secret["metadata"]
    ref = env_of(objects)["QUEUEMGR_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "queuemgr-database", "key": "QUEUEMGR_DATABASE_URL"}
    # A new URL rolls the pods.
    before = one(render(), "Deployment", "queuemgr")["spec"]["template"]["metadata"]
    after = one(objects, "Deployment", "queuemgr")["spec"]["template"]["metadata"]
    assert before["annotations"]["checksum/database"] != after["annotations"]["checksum/database"]
    assert before["annotations"]["checksum/config"] == after["annotations"]["checksum/config"]


def test_an_existing_secret(render: Callable[..., list[Any]]) -> None:
    objects = render({"database": {"existingSecret": "pg-url", "existingSecretKey": "url"}})
    assert not [o for o in objects if o["kind"] == "Secret"]
    ref = env_of(objects)["QUEUEMGR_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "pg-url", "key": "url"}
    annotations = one(objects, "Deployment", "queuemgr")["spec"]["template"]["metadata"]
    assert set(annotations["annotations"]) == {"checksum/config"}
    objects = render({"database": {"existingSecret": "pg-url"}})
    ref = env_of(objects)["QUEUEMGR_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "pg-url", "key": "QUEUEMGR_DATABASE_URL"}


def test_resources(render: Callable[..., list[Any]]) -> None:
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    rendered = container(render({"resources": resources}))["resources"]
    assert rendered == {**resources, "limits": {"cpu": "1", "memory": "2Gi"}}  # merged
    dropped = {**resources, "limits": {"cpu": None, "memory": "2Gi"}}  # as values.yaml says
    assert container(render({"resources": dropped}))["resources"] == resources


def test_an_issuer_of_your_own(render: Callable[..., list[Any]]) -> None:
    ref = {"kind": "ClusterIssuer", "name": "corp-ca", "group": "cert-manager.io"}
    objects = render({"webhook": {"certManager": {"enabled": True, "issuerRef": ref}}})
    assert not [o for o in objects if o["kind"] == "Issuer"]
    assert one(objects, "Certificate", "queuemgr-webhook")["spec"]["issuerRef"] == ref


def test_the_clusters_kubeconfigs_are_mounted(render: Callable[..., list[Any]]) -> None:
    clusters = [
        {"name": "gpu-east", "secretName": "gpu-east-kubeconfig", "key": "config"},
        {"name": "gpu-west", "secretName": "gpu-west-kubeconfig"},
    ]
    objects = render({"clusters": clusters})
    mounts = {m["name"]: m for m in container(objects)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    for cluster, key in zip(clusters, ("config", "kubeconfig"), strict=True):
        name = f"cluster-{cluster['name']}"
        assert mounts[name] == {
            "name": name,
            "mountPath": f"{generate.CLUSTERS_DIR}/{cluster['name']}",
            "readOnly": True,
        }
        assert volumes[name]["secret"] == {
            "secretName": cluster["secretName"],
            "items": [{"key": key, "path": "kubeconfig"}],
        }
    # Beside the configuration's mount, not inside it.
    config = mounts["config"]["mountPath"]
    assert not generate.CLUSTERS_DIR.startswith(config + "/")
    assert "/etc/queuemgr-clusters/<name>/kubeconfig" in (CHART / "values.yaml").read_text()


def test_the_service_monitor_scrapes_the_metrics_service(
    render: Callable[..., list[Any]],
) -> None:
    assert not [o for o in render() if o["kind"] == "ServiceMonitor"]
    values = {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    objects = render(values)
    monitor = one(objects, "ServiceMonitor", "queuemgr")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    metrics = one(objects, "Service", "queuemgr-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= metrics["metadata"]["labels"].items()
    webhook = one(objects, "Service", "queuemgr-webhook")
    assert not selector.items() <= webhook["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [p["name"] for p in metrics["spec"]["ports"]]
    assert endpoint == {"port": "http-metrics", "path": "/metrics", "interval": "30s"}


def test_the_prometheus_rule_is_the_alerts_file(render: Callable[..., list[Any]]) -> None:
    assert not [o for o in render() if o["kind"] == "PrometheusRule"]
    objects = render({"metrics": {"prometheusRule": {"enabled": True}}})
    rule = one(objects, "PrometheusRule", "queuemgr")
    alerts = yaml.safe_load((MANIFESTS / "prometheus" / "alerts.yaml").read_text())
    assert rule["spec"] == alerts  # {{ $labels... }} and {{ $value }} kept as they are
    assert "{{ $labels.cluster_queue }}" in yaml.safe_dump(rule)


def test_the_dashboards_can_be_left_out(render: Callable[..., list[Any]]) -> None:
    objects = render({"grafana": {"dashboards": {"enabled": False}}})
    assert not [o for o in objects if o["metadata"]["name"] == "queuemgr-grafana-dashboards"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"clusters": [{"name": "east"}]}, "secretName"),
        ({"clusters": [{"name": "East_1", "secretName": "s"}]}, "name"),
        ({"clusters": [{"name": "e", "secretName": "s", "path": "x"}]}, "path"),
        ({"replicas": 0}, "replicas"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"database": {"url": "mysql://x"}}, "url"),
        ({"databse": {"url": "postgresql://x"}}, "databse"),
        ({"webhook": {"certManager": {"enabled": "yes"}}}, "enabled"),
    ],
)
def test_bad_values_are_refused(
    helm: Helm, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    assert message in refused(helm, tmp_path, values)


def test_notes_warn_about_the_example_database(helm: Helm, tmp_path: Path) -> None:
    """NOTES.txt is rendered by install, not template: render it through a dry run."""
    args = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    assert "WARNING: the database URL is the chart's EXAMPLE" in helm(*args)
    out = helm(*args, "--set", "database.existingSecret=pg-url")
    assert "WARNING" not in out and "queuemgr db upgrade" in out


def test_the_docs_show_the_install() -> None:
    docs = (MANIFESTS.parent / "docs" / "kubernetes.md").read_text()
    assert "## Helm" in docs and "helm install queuemgr manifests/helm/queuemgr" in docs
    assert "python manifests/helm/generate.py" in docs
