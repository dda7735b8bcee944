"""The admission check worker (controller/provisioning.py) step by step, against a real
Postgres (its verdicts live in the store), the in-memory ProvisioningRequest client
(the test plays the autoscaler), a fake backend and a fake clock.

Covered: ``Provisioned=True`` starts the held gang; ``Failed=True`` evicts it
(``AdmissionCheckFailed``) and requeues it after the check's backoff;
``BookingExpired=True`` before the start makes the next attempt's request; the
``retry_limit``-th failure rejects the check and finishes the workload
(``AdmissionCheckRejected``); ``CapacityRevoked=True`` after the start evicts the
gang and requeues it once it is stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.controller.admission_gate import AdmissionCheckGate
from queuemgr.controller.kube_backend import KubernetesBackend
from queuemgr.controller.kube_section import AdmissionCheckSettings
from queuemgr.controller.leader import LeaderElector
from queuemgr.controller.provisioning import AdmissionCheckWorker
from queuemgr.controller.testing import FakeBackend, FakeClock
from queuemgr.core.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    WorkloadId,
)
from queuemgr.k8s.cluster import WORKLOAD_LABEL
from queuemgr.k8s.jobframework import GenericJob
from queuemgr.k8s.jobs import job_for
from queuemgr.k8s.testing import InMemoryProvisioning
from queuemgr.store import codec
from queuemgr.store.admission_checks import CheckState, check_states
from queuemgr.store.config_objects import upsert_cluster_queue
from queuemgr.store.handle import Database
from queuemgr.store.transitions import submit_workload
from tests.integration.store.helpers import CQ, H100, gang, seed_config

pytestmark = pytest.mark.integration

CHECK = "provisioning-request"
NS = "team-a"
WID = WorkloadId(f"{NS}/g")
T0 = 1_700_000_100.0


def _job_object() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "g",
            "namespace": NS,
            "uid": "uid-g",
            "labels": {"kueue.x-k8s.io/queue-name": "default", WORKLOAD_LABEL: "g"},
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.invalid/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                }
            },
        },
    }


@dataclass
class _Ref:
    obj: dict[str, Any]

    @property
    def job(self) -> GenericJob:
        return job_for(self.obj)


@dataclass
class _Watch:
    """The part of ClusterWatch the worker reads: synced, and a job by workload."""

    synced: bool = True
    jobs: dict[str, _Ref] = field(default_factory=dict)

    def job(self, wid: str) -> _Ref | None:
        return self.jobs.get(wid)


class _Backend(FakeBackend):
    """The fake backend with the watch the worker reads through ``gate.inner``."""

    def __init__(self) -> None:
        super().__init__()
        self.watch = _Watch(jobs={WID: _Ref(_job_object())})

    def set_wake(self, wake: Any) -> None:
        pass


@dataclass
class World:
    engine: Engine
    clock: FakeClock
    backend: _Backend
    gate: AdmissionCheckGate
    api: InMemoryProvisioning
    worker: AdmissionCheckWorker
    elector: LeaderElector

    def admit(self, at: float) -> AdmittedWorkload:
        """The cycle's admission (done here by hand), offered to the gate as the loop does."""
        with self.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE workloads SET state = 'Admitted', admitted_at = :at,"
                    " state_since = :at, cluster_queue = 'team-a', flavor = 'h100'"
                    " WHERE namespace = :ns AND name = 'g'"
                ),
                {"at": codec.timestamp(at), "ns": NS},
            )
        admitted = AdmittedWorkload(
            workload=gang("g"),
            admission=Admission(
                workload=WID,
                cluster_queue=ClusterQueueName("team-a"),
                flavor=FlavorName("h100"),
                placements=(),
            ),
            admitted_at=at,
        )
        self.gate.start(admitted)
        return admitted

    def state(self) -> tuple[str, str, str]:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.text(
                    "SELECT state::text AS state, reason, message FROM workloads"
                    " WHERE namespace = :ns AND name = 'g'"
                ),
                {"ns": NS},
            ).one()
        return row.state, row.reason, row.message

    def check(self) -> Any:
        with self.engine.connect() as conn:
            return check_states(conn, [WID])[WID][CHECK]

    def names(self) -> list[str]:
        return sorted(name for _, name in self.api.requests_by_key)

    def step(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        self.worker.check_once()


def _world(engine: Engine, settings: AdmissionCheckSettings) -> World:
    seed_config(engine)
    with engine.begin() as conn:
        upsert_cluster_queue(conn, dataclasses.replace(CQ, admission_checks=(CHECK,)), actor="t")
        submit_workload(conn, gang("g"))
    db = Database(engine)
    clock = FakeClock(T0)
    backend = _Backend()
    gate = AdmissionCheckGate(cast(KubernetesBackend, backend), db)
    elector = LeaderElector(db, replica="a", retry_interval=0.2)
    assert elector.step()
    api = InMemoryProvisioning()
    worker = AdmissionCheckWorker(
        db=db,
        gate=gate,
        elector=elector,
        clock=clock,
        checks=(settings,),
        api=api,
        flavors=lambda name: H100 if name == H100.name else None,
    )
    return World(engine, clock, backend, gate, api, worker, elector)


@pytest.fixture
def make(engine: Engine) -> Iterator[Any]:
    made: list[World] = []

    def build(**kwargs: Any) -> World:
        settings = AdmissionCheckSettings(
            name=CHECK, provisioning_class="check-capacity.autoscaling.x-k8s.io", **kwargs
        )
        world = _world(engine, settings)
        made.append(world)
        return world

    yield build
    for world in made:
        world.elector.stop()


def test_provisioned_starts_the_held_gang(make: Any) -> None:
    w = make()
    w.admit(T0)
    assert set(w.gate.held()) == {WID}  # checks not Ready: the gang is held
    assert not w.backend.start_calls
    w.step()
    assert w.names() == ["g-provisioning-request-1"]
    (request,) = w.api.requests_by_key.values()
    assert request["spec"]["provisioningClassName"] == "check-capacity.autoscaling.x-k8s.io"
    assert w.check().state is CheckState.PENDING
    w.api.set_condition(NS, "g-provisioning-request-1", "Provisioned", "False", "waiting")
    w.step()
    assert w.check().message == "Provisioned=False: waiting"
    assert not w.backend.start_calls
    w.api.set_condition(NS, "g-provisioning-request-1", "Provisioned", "True", "done")
    w.step()
    assert w.check().state is CheckState.READY
    assert w.backend.start_calls[WID] == 1
    assert not w.gate.held()
    assert w.state()[0] == "Admitted"
    w.step()  # the started gang's request is kept
    assert w.names() == ["g-provisioning-request-1"]


def test_failed_evicts_and_requeues_after_the_backoff(make: Any) -> None:
    w = make(backoff=10, backoff_max=40)
    w.admit(T0)
    w.step()
    w.api.set_condition(NS, "g-provisioning-request-1", "Failed", "True", "out of stock")
    w.step()
    state, reason, message = w.state()
    assert (state, reason) == ("Evicted", "AdmissionCheckFailed")
    assert "Failed=True: out of stock" in message and "requeue 1 in 10s" in message
    st = w.check()
    assert (st.state, st.failures) == (CheckState.RETRY, 1)
    assert not w.gate.held() and not w.backend.start_calls
    w.step(5)  # 6 s after the eviction: still waiting out its backoff
    assert w.state()[0] == "Evicted"
    assert w.names() == []  # the failed request is deleted
    w.step(5)
    assert w.state()[0] == "Pending"
    # Admitted again: the next attempt's request; a second failure waits twice as long.
    w.admit(T0 + 20)
    w.clock.advance(10)
    w.step()
    assert w.names() == ["g-provisioning-request-2"]
    w.api.set_condition(NS, "g-provisioning-request-2", "Failed", "True", "still none")
    w.step()
    assert w.state()[1] == "AdmissionCheckFailed"
    assert "requeue 2 in 20s" in w.state()[2]


def test_booking_expired_before_the_start_asks_again(make: Any) -> None:
    w = make()
    w.admit(T0)
    w.step()
    w.api.set_condition(NS, "g-provisioning-request-1", "BookingExpired", "True", "too late")
    w.step()
    st = w.check()
    assert (st.state, st.attempt) == (CheckState.PENDING, 2)
    w.step()
    assert w.names() == ["g-provisioning-request-2"]  # the expired one deleted
    assert w.state()[0] == "Admitted" and set(w.gate.held()) == {WID}
    w.api.set_condition(NS, "g-provisioning-request-2", "Provisioned", "True", "")
    w.step()
    assert w.backend.start_calls[WID] == 1


def test_the_retry_limit_rejects_the_check_and_finishes_the_workload(make: Any) -> None:
    w = make(backoff=1, retry_limit=2)
    w.admit(T0)
    w.step()
    w.api.set_condition(NS, "g-provisioning-request-1", "Failed", "True", "out of stock")
    w.step()
    assert w.state()[1] == "AdmissionCheckFailed"  # the first failure of two
    w.step(2)
    assert w.state()[0] == "Pending"
    w.admit(T0 + 5)
    w.step()
    assert w.names() == ["g-provisioning-request-2"]
    w.api.set_condition(NS, "g-provisioning-request-2", "Failed", "True", "no quota left")
    w.step()
    state, reason, message = w.state()
    assert (state, reason) == ("Finished", "AdmissionCheckRejected")
    assert message == (
        f"admission check {CHECK} rejected the workload after 2 failed"
        " ProvisioningRequests (retry_limit 2): Failed=True: no quota left"
    )
    st = w.check()
    assert (st.state, st.failures) == (CheckState.REJECTED, 2)
    assert w.worker.rejections == 1
    assert not w.gate.held() and not w.backend.start_calls
    w.step(60)
    assert w.state()[0] == "Finished"  # never requeued
    assert w.names() == []  # its request deleted


def test_capacity_revoked_after_the_start_evicts_and_requeues(make: Any) -> None:
    w = make(backoff=300)
    w.admit(T0)
    w.step()
    w.api.set_condition(NS, "g-provisioning-request-1", "Provisioned", "True", "")
    w.step()
    assert w.backend.start_calls[WID] == 1
    w.api.set_condition(NS, "g-provisioning-request-1", "CapacityRevoked", "True", "preempted VM")
    w.step()
    state, reason, message = w.state()
    assert (state, reason) == ("Evicted", "AdmissionCheckCapacityRevoked")
    assert message == (
        f"admission check {CHECK}: CapacityRevoked=True: preempted VM;"
        " requeued once its pods are gone"
    )
    assert w.check().failures == 0  # not a failure of the request
    w.step()  # no backoff: stopped, then pending again
    assert w.backend.stop_calls[WID] == 1
    assert w.state()[0] == "Pending"
    w.step()
    assert w.names() == []
    # Admitted again: a new request, the gang held until it is provisioned.
    w.admit(T0 + 10)
    w.step()
    assert w.names() == ["g-provisioning-request-2"]
    assert set(w.gate.held()) == {WID}


def test_capacity_revoked_before_the_start_changes_nothing(make: Any) -> None:
    w = make()
    w.admit(T0)
    w.step()
    w.api.set_condition(NS, "g-provisioning-request-1", "CapacityRevoked", "True", "")
    w.step()
    assert w.state()[0] == "Admitted"
    assert set(w.gate.held()) == {WID}
