"""The admission webhook as pure functions: AdmissionReview in, verdict and patch out."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from queuemgr.k8s.admission_handler import AdmissionHandler
from queuemgr.k8s.jobs import PLACEMENT_ANNOTATION, QUEUE_LABEL, job_for
from queuemgr.k8s.review import BadReview
from queuemgr.k8s.rules import WebhookSettings
from queuemgr.k8s.selectors import LabelSelector
from queuemgr.k8s.testing import InMemoryDirectory
from tests.unit.k8s.directory_fixture import directory
from tests.unit.k8s.helpers import apply_patch, decode_patch, manifest

Obj = dict[str, Any]


def review(op: str, obj: Obj | None, old: Obj | None = None, *, namespace: str = "") -> Obj:
    meta = (obj or old or {}).get("metadata", {})
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "operation": op,
            "namespace": namespace or meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "userInfo": {"username": "alice"},
            "object": obj,
            "oldObject": old,
        },
    }


def labelled(name: str, queue: str | None, **changes: Any) -> Obj:
    obj = manifest(name)
    labels = obj["metadata"].setdefault("labels", {})
    if queue is None:
        labels.pop(QUEUE_LABEL, None)
    else:
        labels[QUEUE_LABEL] = queue
    for key, value in changes.items():
        obj["metadata"][key] = value
    return obj


class Namespaces:
    def __init__(self, labels: Mapping[str, Mapping[str, str]]) -> None:
        self._labels = labels

    def labels(self, namespace: str) -> Mapping[str, str] | None:
        return self._labels.get(namespace)


MANAGED = WebhookSettings(namespace_selector=LabelSelector.parse("queuemgr.io/managed=true"))
NAMESPACES = Namespaces({"team-a": {"queuemgr.io/managed": "true"}, "team-b": {}})


# -- mutating -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path"),
    [
        pytest.param("job-gpu", "/spec/suspend", id="job"),
        pytest.param("pytorchjob", "/spec/runPolicy/suspend", id="pytorchjob-runpolicy"),
    ],
)
def test_mutate_suspends_a_labelled_job(name: str, path: str) -> None:
    store = directory()
    store.available = False  # mutation needs no store
    obj = manifest(name)
    out = AdmissionHandler(store).mutate(review("CREATE", obj))
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert out["response"]["allowed"] is True
    ops = decode_patch(out)
    assert [op["path"] for op in ops] == [path]
    assert job_for(apply_patch(obj, ops)).is_suspended()


def test_mutate_drops_a_copied_placement_record() -> None:
    obj = manifest("job-gpu")
    obj["metadata"]["annotations"] = {PLACEMENT_ANNOTATION: "{}", "team": "a"}
    patched = apply_patch(
        obj, decode_patch(AdmissionHandler(directory()).mutate(review("CREATE", obj)))
    )
    assert patched["metadata"]["annotations"] == {"team": "a"}
    assert patched["spec"]["suspend"] is True


def _untouched(out: Obj) -> bool:
    response = out["response"]
    return response["allowed"] is True and "patch" not in response and "status" not in response


@pytest.mark.parametrize(
    ("request_", "handler"),
    [
        pytest.param(
            lambda: review("CREATE", manifest("jobset")),
            lambda d: AdmissionHandler(d),
            id="already-suspended",
        ),
        pytest.param(
            lambda: review("CREATE", labelled("job-gpu", None)),
            lambda d: AdmissionHandler(d),
            id="unlabelled",
        ),
        pytest.param(
            lambda: review("CREATE", labelled("job-gpu", "")),
            lambda d: AdmissionHandler(d),
            id="empty-label",
        ),
        pytest.param(
            lambda: review("UPDATE", manifest("job-gpu"), manifest("job-gpu")),
            lambda d: AdmissionHandler(d),
            id="update-never-resuspends",
        ),
        pytest.param(
            lambda: review("CREATE", labelled("pytorchjob", "research")),
            lambda d: AdmissionHandler(d, MANAGED, NAMESPACES),
            id="unmanaged-namespace",
        ),
        pytest.param(
            lambda: review(
                "CREATE",
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {QUEUE_LABEL: "q"}}},
            ),
            lambda d: AdmissionHandler(d),
            id="unknown-kind",
        ),
    ],
)
def test_mutate_leaves_alone(
    request_: Callable[[], Obj], handler: Callable[[InMemoryDirectory], AdmissionHandler]
) -> None:
    store = directory()
    assert _untouched(handler(store).mutate(request_()))
    assert store.calls == 0


def test_mutate_in_a_managed_namespace() -> None:
    out = AdmissionHandler(directory(), MANAGED, NAMESPACES).mutate(
        review("CREATE", manifest("job-gpu"))
    )
    assert decode_patch(out) == [{"op": "add", "path": "/spec/suspend", "value": True}]


# -- validating: CREATE -----------------------------------------------------------------


def _big_pytorchjob() -> Obj:
    obj = manifest("pytorchjob")
    limits = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    limits["limits"] = {"nvidia.com/gpu": 16, "cpu": "48", "memory": "400Gi"}
    return obj


def _bad_quantity() -> Obj:
    obj = manifest("job-gpu")
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    return obj


CREATE_CASES = [
    pytest.param(lambda: manifest("job-gpu"), None, id="allowed-gpu-job"),
    pytest.param(lambda: labelled("job-cpu", "cpu"), None, id="allowed-cpu-job-on-cpu-queue"),
    pytest.param(
        lambda: manifest("jobset"),
        None,
        id="allowed-jobset",
    ),
    pytest.param(lambda: labelled("job-gpu", "future"), None, id="allowed-capacity-unknown-yet"),
    pytest.param(
        lambda: labelled("job-gpu", "defualt"),
        'LocalQueue "defualt" does not exist in namespace "team-a"; did you mean "default"?',
        id="queue-missing-nearest-name",
    ),
    pytest.param(
        lambda: labelled("job-gpu", "zzz"),
        'LocalQueue "zzz" does not exist in namespace "team-a"; its LocalQueues are "cpu",'
        ' "default", "future", "locked", "orphan"',
        id="queue-missing-listed",
    ),
    pytest.param(
        lambda: labelled("job-gpu", "default", namespace="team-x"),
        'LocalQueue "default" does not exist in namespace "team-x"; namespace "team-x" has no'
        " LocalQueues; ask an administrator for one",
        id="namespace-without-queues",
    ),
    pytest.param(
        lambda: labelled("job-gpu", "locked"),
        'ClusterQueue "locked" (fed by LocalQueue "locked") does not admit namespace "team-a";'
        ' it admits "team-z"',
        id="namespace-not-admitted",
    ),
    pytest.param(
        lambda: labelled("job-gpu", "orphan"),
        'LocalQueue "team-a/orphan" feeds ClusterQueue "deleted", which does not exist',
        id="cluster-queue-missing",
    ),
    pytest.param(
        lambda: labelled("job-cpu", "default"),
        'LocalQueue "default" feeds ClusterQueue "gpu", which has only GPU quota, but no pod of'
        " this job requests a GPU (nvidia.com/gpu)",
        id="gpu-queue-without-gpus",
    ),
    pytest.param(
        _big_pytorchjob,
        'pod set "worker": one pod requests 16 nvidia.com/gpu, 48 cpu, 400Gi memory, more than'
        ' any node of ClusterQueue "gpu" can hold (h100 nodes hold at most 8 nvidia.com/gpu,'
        " 96 cpu, 1Ti memory)",
        id="pod-above-every-node",
    ),
    pytest.param(
        _bad_quantity,
        "spec.template.spec.containers[0].resources.requests.cpu: bad quantity 'lots'",
        id="bad-quantity",
    ),
]


@pytest.mark.parametrize(("make", "message"), CREATE_CASES)
def test_validate_create(make: Callable[[], Obj], message: str | None) -> None:
    out = AdmissionHandler(directory()).validate(review("CREATE", make()))["response"]
    if message is None:
        assert out == {"uid": out["uid"], "allowed": True}
    else:
        assert out["allowed"] is False
        assert out["status"]["message"].startswith(message), out["status"]["message"]
        assert out["status"]["code"] in (403, 422)


def test_every_problem_is_reported_at_once() -> None:
    obj = labelled("job-cpu", "locked")
    containers = obj["spec"]["template"]["spec"]["containers"]
    containers[0]["resources"]["requests"]["cpu"] = "500"
    message = AdmissionHandler(directory()).validate(review("CREATE", obj))["response"]["status"][
        "message"
    ]
    assert message.count("; ") >= 2
    assert "does not admit namespace" in message
    assert "only GPU quota" in message
    assert "one pod requests 500 cpu" in message


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: labelled("job-gpu", None), id="unlabelled"),
        pytest.param(lambda: labelled("job-gpu", ""), id="empty"),
    ],
)
def test_validate_never_reads_the_store_for_unlabelled_jobs(make: Callable[[], Obj]) -> None:
    store = directory()
    store.available = False
    assert _untouched(AdmissionHandler(store).validate(review("CREATE", make())))
    assert store.calls == 0


def test_validate_skips_unmanaged_namespaces() -> None:
    store = directory()
    out = AdmissionHandler(store, MANAGED, NAMESPACES).validate(
        review("CREATE", labelled("jobset", "nope"))
    )
    assert _untouched(out) and store.calls == 0
    denied = AdmissionHandler(store, MANAGED, NAMESPACES).validate(
        review("CREATE", labelled("job-gpu", "nope"))
    )
    assert denied["response"]["allowed"] is False


def test_store_outage_allows_with_a_warning_or_refuses() -> None:
    store = directory()
    store.available = False
    out = AdmissionHandler(store).validate(review("CREATE", manifest("job-gpu")))["response"]
    assert out["allowed"] is True
    assert 'could not check LocalQueue "default"' in out["warnings"][0]
    strict = AdmissionHandler(store, WebhookSettings(allow_on_store_outage=False))
    refused = strict.validate(review("CREATE", manifest("job-gpu")))["response"]
    assert refused["allowed"] is False and refused["status"]["code"] == 503


# -- validating: UPDATE -----------------------------------------------------------------


def running(name: str = "job-gpu", queue: str | None = "default") -> Obj:
    obj = labelled(name, queue)
    obj["spec"]["suspend"] = False
    return obj


def suspended(name: str = "job-gpu", queue: str | None = "default") -> Obj:
    obj = labelled(name, queue)
    obj["spec"]["suspend"] = True
    return obj


def edit(obj: Obj, change: Callable[[Obj], None]) -> Obj:
    out = copy.deepcopy(obj)
    change(out)
    return out


def _parallelism(n: int) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        o["spec"]["parallelism"] = o["spec"]["completions"] = n

    return change


def _gpus(n: int) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        o["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = n

    return change


def _queue(q: str | None) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        if q is None:
            del o["metadata"]["labels"][QUEUE_LABEL]
        else:
            o["metadata"]["labels"][QUEUE_LABEL] = q

    return change


def _controller_annotates(o: Obj) -> None:
    o["metadata"].setdefault("annotations", {})["queuemgr.io/reason"] = "Admitted"
    o["spec"]["template"]["spec"]["nodeSelector"]["gpu"] = "h100"


def _suspend(o: Obj) -> None:
    o["spec"]["suspend"] = True


def _unsuspend(o: Obj) -> None:
    o["spec"]["suspend"] = False


def _finish(o: Obj) -> None:
    o["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}


UPDATE_CASES = [
    pytest.param(
        running,
        _queue("cpu"),
        False,
        "the queue of a running job cannot change (default -> cpu)",
        id="running-queue-changed",
    ),
    pytest.param(
        running,
        _queue(None),
        False,
        "the queue of a running job cannot change (default -> no queue)",
        id="running-label-removed",
    ),
    pytest.param(
        lambda: running(queue=None),
        _queue("default"),
        False,
        "the queue of a running job cannot change (no queue -> default)",
        id="running-unlabelled-gets-label",
    ),
    pytest.param(
        running,
        _parallelism(8),
        False,
        "the pods of a running job cannot change, they hold the quota it was admitted with"
        ' (pod set "main": 4 x (8 nvidia.com/gpu, 24 cpu, 131392Mi memory)'
        " -> 8 x (8 nvidia.com/gpu, 24 cpu, 131392Mi memory))",
        id="running-parallelism-changed",
    ),
    pytest.param(
        running,
        _gpus(4),
        False,
        'pod set "main": 4 x (8 nvidia.com/gpu',
        id="running-requests-changed",
    ),
    pytest.param(running, _controller_annotates, False, None, id="running-controller-annotations"),
    pytest.param(running, _suspend, False, None, id="preemption-suspends"),
    pytest.param(suspended, _unsuspend, True, None, id="admission-unsuspends"),
    pytest.param(
        suspended,
        _queue("defualt"),
        False,
        'LocalQueue "defualt" does not exist',
        id="queued-queue-changed-to-missing",
    ),
    pytest.param(
        suspended,
        _queue("future"),
        False,
        None,
        id="queued-queue-changed-ok",
    ),
    pytest.param(
        suspended,
        _gpus(16),
        False,
        'pod set "main": one pod requests 16 nvidia.com/gpu',
        id="queued-requests-too-big",
    ),
    pytest.param(
        lambda: suspended(queue="defualt"),
        _controller_annotates,
        False,
        None,
        id="queued-unrelated-edit-unchecked",
    ),
    pytest.param(
        suspended,
        _queue("cpu"),
        True,
        "the queue of a running job cannot change (default -> cpu)",
        id="admitted-in-store-not-yet-unsuspended",
    ),
    pytest.param(
        lambda: edit(running(), _finish), _queue("cpu"), False, None, id="finished-job-relabelled"
    ),
]


@pytest.mark.parametrize(("make_old", "change", "admitted", "message"), UPDATE_CASES)
def test_validate_update(
    make_old: Callable[[], Obj], change: Callable[[Obj], None], admitted: bool, message: str | None
) -> None:
    old = make_old()
    new = edit(old, change)
    out = AdmissionHandler(directory(admitted_pretrain=admitted)).validate(
        review("UPDATE", new, old)
    )
    response = out["response"]
    if message is None:
        assert response["allowed"] is True, response
    else:
        assert response["allowed"] is False
        assert message in response["status"]["message"], response["status"]["message"]


def test_running_edit_is_refused_while_the_store_is_down() -> None:
    store = directory()
    store.available = False
    old = running()
    out = AdmissionHandler(store).validate(review("UPDATE", edit(old, _parallelism(2)), old))
    assert out["response"]["allowed"] is False


def test_controller_updates_of_a_queued_job_do_not_read_queues() -> None:
    store = directory()
    old = suspended(queue="deleted-meanwhile")
    out = AdmissionHandler(store).validate(review("UPDATE", edit(old, _controller_annotates), old))
    assert out["response"]["allowed"] is True
    assert store.calls == 1  # only "is it admitted?"


# -- the envelope -----------------------------------------------------------------------


def test_response_echoes_the_uid() -> None:
    r = review("CREATE", manifest("job-gpu"))
    out = AdmissionHandler(directory()).validate(json.dumps(r).encode())
    assert out["response"]["uid"] == r["request"]["uid"]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}
            ).encode(),
            id="v1beta1",
        ),
        pytest.param(
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}
            ).encode(),
            id="no-uid",
        ),
    ],
)
def test_bad_reviews(body: bytes) -> None:
    with pytest.raises(BadReview):
        AdmissionHandler(directory()).validate(body)


def test_subresources_and_deletes_pass() -> None:
    r = review("UPDATE", labelled("job-gpu", "nope"), labelled("job-gpu", "default"))
    r["request"]["subResource"] = "status"
    assert _untouched(AdmissionHandler(directory()).validate(r))
    d = review("DELETE", None, labelled("job-gpu", "nope"))
    assert _untouched(AdmissionHandler(directory()).validate(d))
