"""The ``kubernetes:`` section of serve.yaml, and the helpers of the controller's parts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from queuemgr.controller.kube_readiness import expected_pods, requeue_count
from queuemgr.controller.kube_section import PodsReadySettings
from queuemgr.controller.kube_sync import owned_by_managed_kind
from queuemgr.core.resources import ResourceName
from queuemgr.k8s.dra import DeviceClassMapping
from queuemgr.service.settings import ConfigError, load_config

FULL = """
backend: kubernetes
kubernetes:
  kubeconfig: kube/admin.conf
  managed_namespaces: "queuemgr.io/managed=true,team in (a,b)"
  qps: 30
  burst: 60
  status_qps: 5
  kind_discovery_interval: 2.5
  pods_ready: {timeout: 120, backoff: 10, backoff_max: 600, requeue_limit: 3}
"""


def test_the_kubernetes_section(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(FULL)
    config = load_config(path, env={})
    k = config.kubernetes
    assert config.backend == "kubernetes"
    assert k.kubeconfig == tmp_path / "kube/admin.conf"
    assert k.managed_namespaces == "queuemgr.io/managed=true,team in (a,b)"
    assert (k.qps, k.burst, k.status_qps) == (30, 60, 5)
    assert k.kind_discovery_interval == 2.5
    assert k.pods_ready == PodsReadySettings(
        timeout=120, backoff=10, backoff_max=600, requeue_limit=3
    )
    env = load_config(path, env={"QUEUEMGR_KUBECONFIG": "/etc/kube.conf"})
    assert env.kubernetes.kubeconfig == Path("/etc/kube.conf")


def test_defaults_and_turning_readiness_off(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text("backend: kubernetes\n")
    k = load_config(path, env={}).kubernetes
    assert k.kubeconfig is None and k.managed_namespaces == "" and k.qps == 20
    assert k.kind_discovery_interval == 30
    assert k.pods_ready is not None and k.pods_ready.timeout == 300
    path.write_text("kubernetes: {pods_ready: {enabled: false}}\n")
    assert load_config(path, env={}).kubernetes.pods_ready is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("kubernetes: {qps: 0}", "kubernetes.qps"),
        ("kubernetes: {burst: 0}", "kubernetes.burst"),
        ("kubernetes: {kind_discovery_interval: 0}", "kubernetes.kind_discovery_interval"),
        ("kubernetes: {managed_namespaces: 'a in (b'}", "kubernetes.managed_namespaces"),
        ("kubernetes: {bogus: 1}", "bogus"),
        ("kubernetes: {qps: 5, status_qps: 10}", "kubernetes.status_qps"),
        ("kubernetes: {pods_ready: {timeout: -1}}", "kubernetes.pods_ready.timeout"),
        ("kubernetes: {pods_ready: {requeue_limit: x}}", "kubernetes.pods_ready.requeue_limit"),
        ("kubernetes: {device_classes: {a: b}}", "kubernetes.device_classes"),
        (
            "kubernetes: {device_classes: [{device_class: gpu.example.com}]}",
            "kubernetes.device_classes[0].resource",
        ),
        (
            "kubernetes: {device_classes: [{device_class: Bad_Name, resource: example.com/gpu}]}",
            "kubernetes.device_classes[0].device_class",
        ),
        (
            "kubernetes: {device_classes: [{device_class: g.example.com, resource: 'a b'}]}",
            "kubernetes.device_classes[0].resource",
        ),
        (
            "kubernetes: {device_classes: [{device_class: g.example.com, resource: x/gpu},"
            " {device_class: g.example.com, resource: x/gpu}]}",
            "kubernetes.device_classes[1].device_class",
        ),
        (
            "kubernetes: {device_classes: [{device_class: a.example.com, resource: x/gpu,"
            " driver: d.example.com}, {device_class: b.example.com, resource: x/mig,"
            " driver: d.example.com}]}",
            "kubernetes.device_classes[1].driver",
        ),
    ],
)
def test_a_bad_value_names_its_key(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(path, env={})


def test_device_classes_map_to_quota_resources(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(
        "kubernetes:\n  device_classes:\n"
        "    - {device_class: gpu.example.com, resource: example.com/gpu,\n"
        "       driver: gpu.example.com}\n"
        "    - {device_class: fpga.example.com, resource: example.com/fpga}\n"
    )
    got = load_config(path, env={}).kubernetes.device_classes
    assert got == (
        DeviceClassMapping(
            device_class="gpu.example.com",
            resource=ResourceName("example.com/gpu"),
            driver="gpu.example.com",
        ),
        DeviceClassMapping(
            device_class="fpga.example.com", resource=ResourceName("example.com/fpga")
        ),
    )


def test_backoff_doubles_up_to_its_cap() -> None:
    s = PodsReadySettings(timeout=1, backoff=10, backoff_max=60)
    assert [s.delay(n) for n in (1, 2, 3, 4, 5)] == [10, 20, 40, 60, 60]


def test_expected_pods_and_requeue_count_from_the_job() -> None:
    placed = '{"podSets": {"main": {"nodes": {"n0": 3, "n1": 1}}}}'
    obj = {"metadata": {"annotations": {"queuemgr.io/placement": placed}}}
    assert expected_pods(obj, 9) == 4
    two = '{"podSets": {"head": {"nodes": {"n0": 1}}, "submitter": {"nodes": {"n1": 1}}}}'
    ray = {"metadata": {"annotations": {"queuemgr.io/placement": two}}}
    assert expected_pods(ray, 9) == 2
    assert expected_pods(ray, 9, {"submitter"}) == 1  # a default template's pods: unwatched
    assert expected_pods({"metadata": {}}, 9) == 9
    assert expected_pods({"metadata": {"annotations": {"queuemgr.io/placement": "{"}}}, 9) == 9
    assert requeue_count({"metadata": {"annotations": {"queuemgr.io/requeue-count": "2"}}}) == 2
    assert requeue_count({"metadata": {}}) == 0


def test_a_jobsets_child_job_is_not_a_gang_of_its_own() -> None:
    child = {
        "metadata": {
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}]
        }
    }
    assert owned_by_managed_kind(child)
    assert not owned_by_managed_kind(
        {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod"}]}}
    )
