"""``queuemgr why``: one case per reason code, each built through the CLI and a real cycle.

The base is the CLI tests' cluster (conftest ``QUEUES`` plus four 8-GPU h100
nodes). Each case applies a few more queues, submits workloads, runs one
service cycle (the loop, on the test database) to admit what fits, and asks
``why`` about one workload. Cases that depend on the service's knobs
(``Preempting``, ``WaitingForReservation``) record them as the elected leader
does, so ``why`` decides like that leader.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import Engine

from queuemgr.core.model import WorkloadId
from queuemgr.core.policy import PreemptorAdmission, SchedulerPolicy
from queuemgr.spec.knobs import policy_knobs
from queuemgr.store.leadership import record_leader
from queuemgr.store.transitions import requeue_workload
from tests.integration.cli.conftest import Invoke
from tests.integration.controller.helpers import make_loop, run_one_cycle

pytestmark = pytest.mark.integration

EXTRA = """\
flavors:
  - name: h100
    node_labels: {gpu: h100}
cluster_queues:
  - name: solo                       # no cohort: nominal is a hard cap
    namespaces: [solo]
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 8}
  - name: big                        # more quota than there are nodes
    namespaces: [big]
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 64}
  - name: strict
    queueing_strategy: StrictFIFO
    namespaces: [strict]
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 8}
  - name: owner                      # lends its idle quota, reclaims it by preemption
    cohort: lenders
    preemption: {reclaim_within_cohort: Any}
    namespaces: [owner]
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 16}
  - name: borrower
    cohort: lenders
    namespaces: [borrower]
    resources:
      - flavor: h100
        nominal: {nvidia.com/gpu: 0}
cohorts:
  - name: lenders
local_queues:
  - {namespace: solo, name: default, cluster_queue: solo}
  - {namespace: big, name: default, cluster_queue: big}
  - {namespace: strict, name: default, cluster_queue: strict}
  - {namespace: owner, name: default, cluster_queue: owner}
  - {namespace: borrower, name: default, cluster_queue: borrower}
"""


@dataclass(frozen=True, kw_only=True)
class Job:
    ns: str
    name: str
    gpus: int = 8
    pods: int = 1
    runtime: str | None = None


@dataclass(frozen=True, kw_only=True)
class Case:
    running: tuple[Job, ...] = ()  # submitted, then one cycle admits what fits
    queued: tuple[Job, ...] = ()  # submitted after that cycle
    ask: str  # "ns/name"
    reason: str
    message: tuple[str, ...] = ()  # fragments of the message
    policy: SchedulerPolicy | None = None  # the leader's recorded knobs
    then: Callable[[Invoke], None] | None = None
    eta: bool = False  # whether an ETA is expected
    extra: dict[str, object] = field(default_factory=dict)


def _submit(cli: Invoke, job: Job) -> None:
    args = ["submit", "-q", "default", "-n", job.ns, "--name", job.name]
    args += ["--gpus", str(job.gpus), "--pods", str(job.pods)]
    if job.runtime is not None:
        args += ["--max-runtime", job.runtime]
    r = cli(*args, "--", "train")
    assert r.exit_code == 0, r.output


def _stop_solo(cli: Invoke) -> None:
    assert cli("cq", "stop", "solo").exit_code == 0


AFTER_VICTIMS = SchedulerPolicy(preemptor_admission=PreemptorAdmission.AFTER_VICTIMS_STOP)
EASY = SchedulerPolicy(
    preemptor_admission=PreemptorAdmission.AFTER_VICTIMS_STOP, reservation_depth=1
)

CASES = [
    pytest.param(
        Case(queued=(Job(ns="solo", name="a"),), ask="solo/a", reason="Admissible", eta=True),
        id="Admissible",
    ),
    pytest.param(
        Case(
            running=(Job(ns="solo", name="a"),),
            ask="solo/a",
            reason="Admitted",
            message=("running on flavor h100",),
        ),
        id="Admitted",
    ),
    pytest.param(
        Case(
            running=(Job(ns="solo", name="a", runtime="1h"),),
            queued=(Job(ns="solo", name="b"),),
            ask="solo/b",
            reason="QuotaExceeded",
            message=("needs 8 nvidia.com/gpu on h100", "queue has 0 free of 8"),
            eta=True,
        ),
        id="QuotaExceeded",
    ),
    pytest.param(
        Case(
            running=tuple(Job(ns="team-b", name=f"b{i}", runtime="2h") for i in range(3)),
            queued=(Job(ns="team-b", name="b3"),),
            ask="team-b/b3",
            reason="CohortExhausted",
            message=("cohort lends 0",),
            eta=True,
        ),
        id="CohortExhausted",
    ),
    pytest.param(
        Case(
            running=tuple(Job(ns="big", name=f"g{i}") for i in range(4)),
            queued=(Job(ns="big", name="g4"),),
            ask="big/g4",
            reason="NoNodeFits",
            message=("h100",),
        ),
        id="NoNodeFits",
    ),
    pytest.param(
        Case(
            queued=(Job(ns="team-a", name="huge", gpus=16),),
            ask="team-a/huge",
            reason="Inadmissible",
            message=("no set of empty nodes can hold the gang",),
        ),
        id="Inadmissible",
    ),
    pytest.param(
        Case(
            running=(Job(ns="strict", name="r", runtime="1h"),),
            queued=(Job(ns="strict", name="head"), Job(ns="strict", name="small", gpus=1)),
            ask="strict/small",
            reason="BlockedByHead",
            message=("strict/head",),
            eta=True,
        ),
        id="BlockedByHead",
    ),
    pytest.param(
        Case(
            running=tuple(Job(ns="borrower", name=f"x{i}") for i in range(2)),
            queued=(Job(ns="owner", name="mine"),),
            ask="owner/mine",
            reason="Preempting",
            message=("the next cycle preempts borrower/x", "claims h100-"),
            policy=AFTER_VICTIMS,
            eta=False,  # it starts once its victims' pods have stopped: eta_reason says so
        ),
        id="Preempting",
    ),
    pytest.param(
        Case(
            running=(
                Job(ns="big", name="forever"),
                Job(ns="big", name="r1", runtime="1h"),
                Job(ns="big", name="r2", runtime="1h"),
            ),
            queued=(
                Job(ns="big", name="gang", pods=3),
                Job(ns="big", name="small", gpus=1, runtime="2h"),
            ),
            ask="big/small",
            reason="WaitingForReservation",
            message=("would delay big/gang",),
            policy=EASY,
            eta=True,
        ),
        id="WaitingForReservation",
    ),
    pytest.param(
        Case(
            queued=(Job(ns="solo", name="a"),),
            ask="solo/a",
            reason="ClusterQueueStopped",
            message=("solo is stopped",),
            then=_stop_solo,
        ),
        id="ClusterQueueStopped",
    ),
]


@pytest.fixture
def extra_queues(cli: Invoke, applied: Path, tmp_path: Path) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text(EXTRA)
    r = cli("apply", "-f", str(path))
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("case", CASES)
def test_why_gives_each_reason_with_its_numbers(
    cli: Invoke, engine: Engine, extra_queues: None, case: Case
) -> None:
    for job in case.running:
        _submit(cli, job)
    if case.running:
        run_one_cycle(engine, policy=case.policy or AFTER_VICTIMS)
    if case.policy is not None:
        with engine.begin() as conn:
            knobs = policy_knobs(case.policy)
            record_leader(conn, replica="test-leader", policy=knobs, now=time.time())
    for job in case.queued:
        _submit(cli, job)
    if case.then is not None:
        case.then(cli)
    ns, _, name = case.ask.partition("/")
    r = cli("why", name, "-n", ns, "-o", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    reason = "Admitted" if doc["state"] == "Admitted" else doc["reason"]
    assert reason == case.reason, doc
    for fragment in case.message:
        assert fragment in doc["message"], doc["message"]
    assert (doc["eta"] is not None) == case.eta, doc
    if doc["eta"] is None and doc["state"] != "Admitted":
        assert doc["eta_reason"], doc
    if case.policy is not None:
        assert doc["scheduler"]["replica"] == "test-leader"
        assert doc["scheduler"]["knobs"] == policy_knobs(case.policy)
    table = cli("why", name, "-n", ns)
    assert table.exit_code == 0 and case.reason in table.output


def test_why_says_what_must_free_up(cli: Invoke, engine: Engine, extra_queues: None) -> None:
    for i, runtime in enumerate(("30m", "90m")):
        _submit(cli, Job(ns="team-b", name=f"b{i}", runtime=runtime))
    _submit(cli, Job(ns="team-b", name="b2"))  # no declared runtime
    run_one_cycle(engine)
    _submit(cli, Job(ns="team-b", name="waiting", gpus=8))
    doc = json.loads(cli("why", "waiting", "-n", "team-b", "-o", "json").output)
    frees = doc["frees_up"]
    assert [e["workload"] for e in frees["ending"]] == ["team-b/b0"]
    assert frees["without_runtime"] == 1
    ending = r"1 admitted workload\(s\) in cohort research end within (29m\d+s|30m) "
    assert re.search(ending, frees["message"]), frees["message"]
    assert "freeing 8 GPUs (it needs 8)" in frees["message"]
    assert 29 * 60 <= doc["eta_in_s"] <= 30 * 60


def test_why_shows_a_claim_its_victims_and_then_the_victims_backoff(
    cli: Invoke, engine: Engine, extra_queues: None
) -> None:
    for i in range(2):
        _submit(cli, Job(ns="borrower", name=f"x{i}"))
    run_one_cycle(engine)
    _submit(cli, Job(ns="owner", name="mine"))
    # A leader evicts a victim for owner/mine and commits the claim, but has not
    # stopped the victim yet (as if it died right after its commit).
    loop, elector, _ = make_loop(engine)
    loop._apply = lambda *args, **kwargs: None  # type: ignore[method-assign]
    assert elector.step()
    try:
        report = loop.run_once()
    finally:
        elector.stop()
    assert report is not None and len(report.evicted) == 1
    victim = report.evicted[0]

    doc = json.loads(cli("why", "mine", "-n", "owner", "-o", "json").output)
    assert doc["reason"] == "Preempting", doc
    assert doc["eta"] is None and "victims' pods have stopped" in doc["eta_reason"]
    claim = doc["claim"]
    assert claim["victims"] == [victim] and claim["still_running"] == [victim]
    assert claim["flavor"] == "h100" and len(claim["nodes"]) == 1
    assert claim["made_at"] is not None
    assert f"still running (evicted, not requeued yet): {victim}" in doc["message"]
    assert claim["nodes"][0] in doc["message"]
    table = cli("why", "mine", "-n", "owner").output
    assert "Claim:" in table and f"still running: {victim}" in table

    now = time.time()
    with engine.begin() as conn:  # its pods are gone: requeued, with the service's backoff
        until = requeue_workload(
            conn, WorkloadId(victim), now=now, backoff=SchedulerPolicy().requeue_delay
        )
    assert until == pytest.approx(now + 60)
    doc = json.loads(cli("why", "mine", "-n", "owner", "-o", "json").output)
    assert doc["reason"] == "Admissible" and "on the room it claimed" in doc["message"]
    assert doc["claim"]["still_running"] == []

    ns, _, name = victim.partition("/")
    doc = json.loads(cli("why", name, "-n", ns, "-o", "json").output)
    assert doc["reason"] == "BackingOff", doc
    backoff = doc["backoff"]
    assert backoff["evictions"] == 1 and 55 <= backoff["in_s"] <= 60
    assert "preempted once: backs off until" in doc["message"]
    assert doc["eta"] is None and backoff["until"] in doc["eta_reason"]
    table = cli("why", name, "-n", ns).output
    assert "BackingOff" in table and "after 1 eviction(s)" in table
    status = json.loads(cli("status", name, "-n", ns, "-o", "json").output)
    assert status["evictions"] == 1 and status["requeue_at"] is not None
