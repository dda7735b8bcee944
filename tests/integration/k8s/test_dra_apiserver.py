"""DRA devices charged against quota, against the real apiserver's ``resource.k8s.io/v1``.

A Job whose pod takes a claim from a ResourceClaimTemplate asking two devices
of a mapped DeviceClass is charged 2 units of the mapped quota resource and
admitted; the next such Job waits with ``QuotaExceeded`` naming the resource;
a Job whose template asks an unmapped class is refused with a reason naming
it. With the driver named and its ResourceSlices published, node fit counts
each node's devices: two one-device nodes do not hold a two-device pod, and a
slice's newer generation with two devices does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from sqlalchemy import text

from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    FlavorName,
    FlavorQuota,
)
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.k8s.dra import DeviceClassMapping
from queuemgr.k8s.jobstatus import REASON_ANNOTATION
from queuemgr.store import config_objects as store_config
from tests.controlplane.harness import wait_for
from tests.integration.k8s.kube_env import KubeEnv, job_manifest

pytestmark = pytest.mark.integration

GROUP, VERSION = "resource.k8s.io", "v1"
DRIVER = "gpu.example.com"
MAPPED, UNMAPPED = "gpu.example.com", "fpga.example.com"
DEVICE = ResourceName("example.com/gpu")


def _custom(env: KubeEnv) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(env.api)


def _device_classes(env: KubeEnv) -> None:
    for name in (MAPPED, UNMAPPED):
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DeviceClass",
            "metadata": {"name": f"{name}-{env.suffix}"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]},
        }
        _custom(env).create_cluster_custom_object(GROUP, VERSION, "deviceclasses", body)


def _claim_template(env: KubeEnv, ns: str, name: str, device_class: str, count: int) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "devices",
                            "exactly": {
                                "deviceClassName": f"{device_class}-{env.suffix}",
                                "allocationMode": "ExactCount",
                                "count": count,
                            },
                        }
                    ]
                }
            }
        },
    }
    _custom(env).create_namespaced_custom_object(GROUP, VERSION, ns, "resourceclaimtemplates", body)


def _claiming_job(name: str, template: str) -> dict[str, Any]:
    job = job_manifest(name, gpus=0)
    pod = job["spec"]["template"]["spec"]
    pod["resourceClaims"] = [{"name": "devices", "resourceClaimTemplateName": template}]
    pod["containers"][0].setdefault("resources", {})["claims"] = [{"name": "devices"}]
    return job


def _slice(env: KubeEnv, node: str, devices: int, generation: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def _quota(env: KubeEnv, devices: int) -> None:
    """team-a's ClusterQueue gains ``devices`` of the mapped resource and leaves the
    cohort, so that its nominal quota is a hard cap (``QuotaExceeded`` beyond it)."""
    a = env.namespaces[0]
    nominal = {GPU: 8, DEVICE: devices}
    with env.engine.begin() as conn:
        store_config.upsert_cluster_queue(
            conn,
            ClusterQueue(
                name=ClusterQueueName("team-a"),
                flavors=(FlavorQuota(flavor=FlavorName("h100"), nominal=nominal),),
                namespaces=frozenset({a}),
            ),
            actor="test",
        )


def _reason(env: KubeEnv, ns: str, name: str) -> str:
    notes = env.job(ns, name).metadata.annotations or {}
    return str(notes.get(REASON_ANNOTATION, ""))


def _charged(env: KubeEnv, name: str) -> tuple[dict[str, int], list[str]]:
    with env.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT s.requests, s.quota_only FROM pod_sets s JOIN workloads w"
                " ON w.id = s.workload_id WHERE w.name = :name"
            ),
            {"name": name},
        ).one()
    return dict(row.requests), list(row.quota_only)


def test_a_mapped_claim_is_charged_and_an_unmapped_one_refused(env: KubeEnv) -> None:
    a = env.namespaces[0]
    _quota(env, devices=2)
    _device_classes(env)
    _claim_template(env, a, "two", MAPPED, 2)
    _claim_template(env, a, "odd", UNMAPPED, 1)
    mapping = DeviceClassMapping(device_class=f"{MAPPED}-{env.suffix}", resource=DEVICE)
    env.start(device_classes=(mapping,))

    env.batch.create_namespaced_job(a, _claiming_job("first", "two"))
    env.wait_state("first", "Admitted")
    wait_for(lambda: not env.suspended(a, "first"), what="first unsuspended")
    requests, quota_only = _charged(env, "first")
    assert requests.get(str(DEVICE)) == 2
    assert quota_only == [str(DEVICE)]  # no driver named: quota only

    env.batch.create_namespaced_job(a, _claiming_job("second", "two"))
    env.wait_state("second", "Pending")
    wait_for(lambda: _reason(env, a, "second"), what="second's reason")
    reason = _reason(env, a, "second")
    assert reason.startswith(f"QuotaExceeded: needs 2 {DEVICE} on h100"), reason
    assert env.suspended(a, "second")

    env.batch.create_namespaced_job(a, _claiming_job("odd", "odd"))
    wait_for(lambda: _reason(env, a, "odd").startswith("Invalid"), what="odd's reason")
    reason = _reason(env, a, "odd")
    assert f"{UNMAPPED}-{env.suffix}" in reason and "not mapped" in reason
    assert "odd" not in env.states()
    assert env.suspended(a, "odd")


def test_node_fit_counts_the_devices_resourceslices_publish(env: KubeEnv) -> None:
    a = env.namespaces[0]
    _quota(env, devices=4)
    _device_classes(env)
    _claim_template(env, a, "two", MAPPED, 2)
    custom = _custom(env)
    for node in env.nodes:
        custom.create_cluster_custom_object(
            GROUP, VERSION, "resourceslices", _slice(env, node, 1, generation=1)
        )
    try:
        mapping = DeviceClassMapping(
            device_class=f"{MAPPED}-{env.suffix}", resource=DEVICE, driver=DRIVER
        )
        env.start(device_classes=(mapping,))
        env.batch.create_namespaced_job(a, _claiming_job("wide", "two"))
        env.wait_state("wide", "Inadmissible")  # quota fits; no node has two devices
        _, quota_only = _charged(env, "wide")
        assert quota_only == []  # the driver publishes: placed on nodes
        wait_for(lambda: _reason(env, a, "wide"), what="wide's reason")
        assert "no set of empty nodes can hold the gang" in _reason(env, a, "wide")

        # The driver republishes the first node's pool with two devices (a newer generation).
        name = f"{env.nodes[0]}-{DRIVER}"
        current = custom.get_cluster_custom_object(GROUP, VERSION, "resourceslices", name)
        body = _slice(env, env.nodes[0], 2, generation=2)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        custom.replace_cluster_custom_object(GROUP, VERSION, "resourceslices", name, body)
        env.wait_state("wide", "Admitted")
        placement = json.loads(env.job(a, "wide").metadata.annotations["queuemgr.io/placement"])
        assert env.nodes[0] in json.dumps(placement)
    finally:
        for node in env.nodes:
            custom.delete_cluster_custom_object(
                GROUP, VERSION, "resourceslices", f"{node}-{DRIVER}"
            )
