"""ProvisioningRequests built from a job: one PodTemplate per pod set with its count, the
flavor's node labels and tolerations added, the check's class; conditions read back;
the in-memory client the worker's tests play the autoscaler with."""

from __future__ import annotations

from queuemgr.core.model import FlavorName, ResourceFlavor, TaintEffect, Toleration
from queuemgr.k8s.cluster import WORKLOAD_LABEL
from queuemgr.k8s.jobs import job_for
from queuemgr.k8s.provisioning import (
    CHECK_LABEL,
    MAX_NAME,
    conditions,
    object_name,
    request_name,
    request_objects,
)
from queuemgr.k8s.testing import InMemoryProvisioning
from tests.unit.k8s.helpers import manifest

H100 = ResourceFlavor(
    name=FlavorName("h100"),
    node_labels={"gpu": "h100"},
    tolerations=(Toleration(key="gpu", value="h100", effect=TaintEffect.NO_SCHEDULE),),
)


def _objects(name: str = "jobset") -> tuple[dict, tuple[dict, ...]]:  # type: ignore[type-arg]
    obj = manifest(name)
    obj["metadata"]["uid"] = "1234"
    made = request_objects(
        job_for(obj),
        H100,
        check="provisioning-request",
        attempt=2,
        provisioning_class="check-capacity.autoscaling.x-k8s.io",
        parameters={"ValidUntilSeconds": "600"},
    )
    return made.request, made.pod_templates


def test_one_pod_template_per_pod_set_with_its_count() -> None:
    request, templates = _objects()
    job = manifest("jobset")
    name = job["metadata"]["name"]
    assert request["apiVersion"] == "autoscaling.x-k8s.io/v1"
    assert request["kind"] == "ProvisioningRequest"
    assert request["metadata"]["name"] == f"{name}-provisioning-request-2"
    assert request["metadata"]["namespace"] == job["metadata"]["namespace"]
    assert request["metadata"]["labels"] == {
        CHECK_LABEL: "provisioning-request",
        WORKLOAD_LABEL: name,
    }
    assert request["metadata"]["ownerReferences"][0]["uid"] == "1234"
    spec = request["spec"]
    assert spec["provisioningClassName"] == "check-capacity.autoscaling.x-k8s.io"
    assert spec["parameters"] == {"ValidUntilSeconds": "600"}
    assert [(ps["podTemplateRef"]["name"], ps["count"]) for ps in spec["podSets"]] == [
        (f"ppt-{name}-provisioning-request-2-driver", 1),
        (f"ppt-{name}-provisioning-request-2-workers", 8),
    ]
    assert [t["metadata"]["name"] for t in templates] == [
        ps["podTemplateRef"]["name"] for ps in spec["podSets"]
    ]
    for t in templates:
        pod = t["template"]["spec"]
        assert pod["nodeSelector"]["gpu"] == "h100"
        assert {"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"} in (
            pod["tolerations"]
        )
        assert pod["containers"]  # the job's own pod spec


def test_the_job_is_not_changed() -> None:
    obj = manifest("job-gpu")
    before = manifest("job-gpu")
    request_objects(
        job_for(obj), H100, check="c", attempt=1, provisioning_class="k.example.com", parameters={}
    )
    assert obj == before


def test_names_stay_valid_object_names() -> None:
    long = "j" * 250
    name = request_name(long, "provisioning-request", 1)
    assert len(name) <= MAX_NAME and name != request_name(long, "provisioning-request", 2)
    assert object_name("a", "b") == "a-b"


def test_conditions_read_back() -> None:
    obj = {
        "status": {
            "conditions": [
                {"type": "Provisioned", "status": "False", "reason": "Waiting", "message": "x"},
                {"type": "Failed", "status": "True", "reason": "OutOfStock", "message": ""},
            ]
        }
    }
    found = conditions(obj)
    assert found["Provisioned"].text == "Provisioned=False: x"
    assert not found["Provisioned"].true
    assert found["Failed"].true and found["Failed"].text == "Failed=True: OutOfStock"
    assert conditions({}) == {}


def test_the_in_memory_client_plays_the_autoscaler() -> None:
    api = InMemoryProvisioning()
    obj = manifest("jobset")
    made = request_objects(
        job_for(obj), H100, check="pr", attempt=1, provisioning_class="c.example", parameters={}
    )
    api.create(made)
    api.create(made)  # already there: kept
    assert api.created == 1 and len(api.pod_templates) == 2
    (listed,) = api.requests()
    meta = listed["metadata"]
    api.set_condition(meta["namespace"], meta["name"], "Provisioned", "True", "ok")
    assert conditions(api.requests()[0])["Provisioned"].true
    api.delete(meta["namespace"], meta["name"])
    assert api.requests() == [] and api.pod_templates == {}
