"""Quota-only resources: charged against quota, left out of node fit.

They are DRA devices that no node reports (no ResourceSlices published).
"""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from queuemgr.core.model import PodSet, Workload
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.core.verdicts import PendingReason
from tests.builders import World, make_admitted, make_cq, make_nodes
from tests.builders import make_workload as wl

DEVICE = ResourceName("example.com/gpu")


def claiming(name: str, devices: int, *, quota_only: bool, pods: int = 1) -> Workload:
    """A pod set asking for 1 GPU and ``devices`` DRA devices per pod."""
    base = wl(name).ns("q").gang(pods).gpus(1).build()
    ps = dataclasses.replace(
        base.pod_sets[0],
        requests={**base.pod_sets[0].requests, DEVICE: devices},
        quota_only=frozenset({DEVICE}) if quota_only else frozenset(),
    )
    return dataclasses.replace(base, pod_sets=(ps,))


def world(device_quota: int) -> World:
    return (
        World()
        .node(make_nodes("n", 2, flavor="f"))  # 8 GPUs each; no node reports the devices
        .cq(make_cq("q").flavor("f").nominal(**{"gpu": 16, DEVICE: device_quota}))
    )


@pytest.mark.parametrize(
    ("quota_only", "admitted"),
    [
        pytest.param(True, True, id="quota-only-fits-by-quota"),
        pytest.param(False, False, id="node-bound-fits-no-node"),
    ],
)
def test_a_device_no_node_reports_is_checked_against_quota_alone(
    quota_only: bool, admitted: bool
) -> None:
    res = world(device_quota=4).submit(claiming("a", 2, quota_only=quota_only)).run()
    assert ("q/a" in res.admitted_ids()) is admitted


def test_quota_only_devices_still_take_quota() -> None:
    res = (
        world(device_quota=4)
        .submit(claiming("a", 2, quota_only=True, pods=2))
        .submit(claiming("b", 2, quota_only=True))
        .run()
    )
    assert "q/a" in res.admitted_ids()
    assert "q/b" not in res.admitted_ids()
    assert res.status("q/b").reason is PendingReason.QUOTA_EXCEEDED
    assert str(DEVICE) in res.status("q/b").message


def test_a_running_quota_only_gang_takes_no_node_room_for_its_devices() -> None:
    running = claiming("r", 3, quota_only=True, pods=4)
    w = world(device_quota=24).running(make_admitted(running, "q", "f", {"n-0": 4}))
    res = w.submit(claiming("a", 1, quota_only=True, pods=12)).run()
    assert res.snapshot.node_free["n-0"].get(DEVICE, 0) == 0  # not -12
    assert res.snapshot.node_free["n-0"][GPU] == 4
    assert "q/a" in res.admitted_ids()  # 4 GPUs of n-0 and 8 of n-1


def test_node_requests_leave_out_quota_only_resources() -> None:
    ps = claiming("a", 2, quota_only=True).pod_sets[0]
    assert ps.requests[DEVICE] == 2
    assert DEVICE not in ps.node_requests and ps.node_requests[GPU] == 1
    plain = claiming("a", 2, quota_only=False).pod_sets[0]
    assert plain.node_requests is plain.requests
    assert ps.shape_part != plain.shape_part  # they schedule differently


def test_a_pod_set_pickled_before_quota_only_existed_loads_without_it() -> None:
    ps = claiming("a", 2, quota_only=False).pod_sets[0]
    old_state = ps.__getstate__()[:-1]  # the fields as they were before quota_only
    loaded = PodSet.__new__(PodSet)
    loaded.__setstate__(old_state)
    assert loaded == ps and loaded.quota_only == frozenset()
    assert pickle.loads(pickle.dumps(ps)) == ps
