"""DRA claims charged by device class (queuemgr.k8s.dra), and ResourceSlices counted per node.

The lookup of ResourceClaimTemplates is the in-memory one beside the adapter;
the job is a real manifest (tests/unit/k8s/manifests) given a claim.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from queuemgr.core.resources import ResourceName
from queuemgr.k8s.dra import (
    DeviceCharger,
    DeviceClassMapping,
    StaticClaimTemplates,
    published_drivers,
    slice_devices,
)
from queuemgr.k8s.jobs import job_for
from queuemgr.k8s.manifest import ManifestError
from tests.unit.k8s.helpers import manifest

NS = "team-a"
GPU_CLASS, DEVICE = "gpu.example.com", ResourceName("example.com/gpu")
MAPPED = DeviceClassMapping(device_class=GPU_CLASS, resource=DEVICE)
DRIVEN = DeviceClassMapping(device_class=GPU_CLASS, resource=DEVICE, driver="gpu.example.com")


def _template(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": name},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def _exactly(device_class: str = GPU_CLASS, **more: Any) -> dict[str, Any]:
    return {"name": "r", "exactly": {"deviceClassName": device_class, **more}}


TEMPLATES = StaticClaimTemplates(
    [
        _template("two", _exactly(count=2)),
        _template("one-default", _exactly()),
        _template("pair", _exactly(count=2), _exactly(count=1)),
        _template("fpga", _exactly("fpga.example.com")),
        _template("all", _exactly(allocationMode="All")),
        _template("big", _exactly(count=100_000)),
        _template("choice", {"name": "r", "firstAvailable": [{"name": "a"}]}),
    ]
)


def _pod(*claims: dict[str, Any]) -> dict[str, Any]:
    return {"containers": [{"name": "c"}], "resourceClaims": list(claims)}


def _claim(template: str) -> dict[str, Any]:
    return {"name": "devices", "resourceClaimTemplateName": template}


@pytest.mark.parametrize(
    ("claims", "charged"),
    [
        pytest.param([_claim("two")], 2, id="count-2"),
        pytest.param([_claim("one-default")], 1, id="count-defaults-to-1"),
        pytest.param([_claim("pair")], 3, id="requests-add-up"),
        pytest.param([_claim("two"), _claim("one-default")], 3, id="claims-add-up"),
    ],
)
def test_a_claim_is_charged_count_times_devices(claims: list[dict[str, Any]], charged: int) -> None:
    charge = DeviceCharger([MAPPED], TEMPLATES).charge(_pod(*claims), "spec", NS)
    assert charge.requests == {DEVICE: charged}
    assert charge.quota_only == {DEVICE}  # no driver named


def test_a_published_driver_places_the_devices_on_nodes() -> None:
    charger = DeviceCharger([DRIVEN], TEMPLATES, published=lambda d: d == "gpu.example.com")
    charge = charger.charge(_pod(_claim("two")), "spec", NS)
    assert (charge.requests, charge.quota_only) == ({DEVICE: 2}, frozenset())
    unpublished = DeviceCharger([DRIVEN], TEMPLATES).charge(_pod(_claim("two")), "spec", NS)
    assert unpublished.quota_only == {DEVICE}


def test_without_mappings_claims_are_not_read() -> None:
    charge = DeviceCharger([], TEMPLATES).charge(_pod(_claim("missing")), "spec", NS)
    assert charge.requests == {}


@pytest.mark.parametrize(
    ("claim", "path", "words"),
    [
        pytest.param(
            _claim("fpga"),
            "ResourceClaimTemplate fpga: spec.spec.devices.requests[0].exactly.deviceClassName",
            "'fpga.example.com'",
            id="unmapped-class",
        ),
        pytest.param(
            _claim("missing"),
            "spec.resourceClaims[0].resourceClaimTemplateName",
            "no ResourceClaimTemplate in namespace 'team-a' is named 'missing'",
            id="missing-template",
        ),
        pytest.param(
            {"name": "d", "resourceClaimName": "shared"},
            "spec.resourceClaims[0].resourceClaimName",
            "'shared'",
            id="shared-claim",
        ),
        pytest.param(
            _claim("all"),
            "ResourceClaimTemplate all: spec.spec.devices.requests[0].exactly.allocationMode",
            "'All'",
            id="allocation-all",
        ),
        pytest.param(
            _claim("big"),
            "ResourceClaimTemplate big: spec.spec.devices.requests[0].exactly.count",
            "100000",
            id="count-out-of-range",
        ),
        pytest.param(
            _claim("choice"),
            "ResourceClaimTemplate choice: spec.spec.devices.requests[0].firstAvailable",
            "alternatives",
            id="first-available",
        ),
        pytest.param("claim", "spec.resourceClaims[0]", "expected an object", id="not-an-object"),
    ],
)
def test_what_cannot_be_charged_is_refused_naming_it(claim: Any, path: str, words: str) -> None:
    with pytest.raises(ManifestError) as refused:
        DeviceCharger([MAPPED], TEMPLATES).charge(_pod(claim), "spec", NS)
    assert refused.value.path == path
    assert words in str(refused.value)


def test_the_job_charges_each_pod_of_each_pod_set() -> None:
    obj = copy.deepcopy(manifest("job-gpu"))
    obj["metadata"]["namespace"] = NS
    pod = obj["spec"]["template"]["spec"]
    pod["resourceClaims"] = [_claim("two")]
    job = job_for(obj)
    (plain,) = job.pod_sets()
    (charged,) = job.pod_sets(DeviceCharger([MAPPED], TEMPLATES))
    assert DEVICE not in plain.requests
    assert charged.requests == {**plain.requests, DEVICE: 2}
    assert charged.node_requests == plain.requests  # quota only: node fit leaves it out
    assert job.workload(devices=DeviceCharger([MAPPED], TEMPLATES)).pod_sets == (charged,)


def test_a_job_of_more_than_eight_pod_sets_is_refused() -> None:
    obj = copy.deepcopy(manifest("raycluster"))
    groups = obj["spec"]["workerGroupSpecs"]
    while len(groups) < 8:
        extra = copy.deepcopy(groups[0])
        extra["groupName"] = f"g{len(groups)}"
        groups.append(extra)
    with pytest.raises(ManifestError, match="at most 8 pod sets"):
        job_for(obj).pod_sets()
    groups.pop()
    assert len(job_for(obj).pod_sets()) == 8


def _slice(node: str, devices: int, *, pool: str | None = None, generation: int = 1) -> Any:
    return {
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": pool or node, "generation": generation},
            "devices": [{"name": f"d{i}"} for i in range(devices)],
        }
    }


def test_slices_count_per_node_at_the_newest_generation_of_a_pool() -> None:
    slices = [
        _slice("n1", 4, generation=1),
        _slice("n1", 2, generation=2),  # republished: replaces generation 1
        _slice("n2", 1, pool="p"),
        _slice("n2", 3, pool="q"),  # two pools on one node add up
        {"spec": {"driver": "other.example.com", "nodeName": "n3", "devices": [{"name": "x"}]}},
        {"spec": {"driver": "gpu.example.com", "allNodes": True, "devices": [{"name": "x"}]}},
    ]
    counted = slice_devices(slices, {"gpu.example.com": DEVICE})
    assert counted == {"n1": {DEVICE: 2}, "n2": {DEVICE: 4}}
    assert published_drivers(slices) == {"gpu.example.com", "other.example.com"}
