"""PreemptionTally: the figures simulate, the demo and the service report from decisions."""

from __future__ import annotations

import dataclasses

import pytest

from queuemgr.core.model import AdmittedWorkload, WorkloadId
from queuemgr.core.reasons import Decisions, Eviction, PreemptionReason
from queuemgr.core.tally import PreemptionTally
from tests.builders import World, make_admitted, make_cq, make_nodes, make_workload


def _decided(*log: AdmittedWorkload | Eviction) -> Decisions:
    empty = World().cq(make_cq("a").nominal(gpu=8)).node(make_nodes("n", 1)).run()
    return dataclasses.replace(empty.decisions, log=log)


def _run(name: str, *, gpus: int = 4, at: float = 0.0) -> AdmittedWorkload:
    w = make_workload(name).ns("a").gpus(gpus).build()
    return make_admitted(w, "a", "default", {"n-0": 1}, at=at)


def _evict(
    victim: AdmittedWorkload,
    preemptor: str,
    reason: PreemptionReason = PreemptionReason.IN_COHORT_RECLAMATION,
) -> Eviction:
    return Eviction(
        victim=victim,
        preemptor=WorkloadId(preemptor),
        preemptor_cluster_queue=victim.admission.cluster_queue,
        reason=reason,
    )


@pytest.mark.parametrize(
    ("order", "wasted"),
    [
        pytest.param(["preemptor", "victim"], 0, id="preemptor-first"),
        pytest.param(["victim", "preemptor"], 1, id="victim-back-while-preemptor-waits"),
    ],
)
def test_a_victim_back_before_its_preemptor_is_a_wasted_preemption(
    order: list[str], wasted: int
) -> None:
    victim, preemptor = _run("v", at=10.0), _run("p")
    tally = PreemptionTally()
    tally.observe(_decided(_evict(victim, "a/p")), now=30.0)
    runs = {"victim": victim, "preemptor": preemptor}
    for who in order:
        tally.observe(_decided(runs[who]), now=40.0)
    assert tally.wasted == wasted
    assert tally.preemptions == 1
    assert tally.lost_gpu_seconds == 4 * (30.0 - 10.0)


def test_counts_per_workload() -> None:
    v, w = _run("v"), _run("w")
    tally = PreemptionTally()
    tally.observe(_decided(_evict(v, "a/p"), _evict(w, "a/p")), now=1.0)
    tally.observe(_decided(_run("p")), now=1.0)
    tally.observe(_decided(_evict(v, "a/q")), now=2.0)
    assert tally.by_workload == {"a/v": 2, "a/w": 1}
    assert tally.most_per_workload == 2
    assert tally.wasted == 0


def test_lost_work_is_split_by_the_rule_that_threw_it_away() -> None:
    fair, reclaim = PreemptionReason.IN_COHORT_FAIR_SHARING, PreemptionReason.IN_COHORT_RECLAMATION
    tally = PreemptionTally()
    tally.observe(_decided(_evict(_run("v", gpus=2, at=10.0), "a/p", fair)), now=20.0)
    tally.observe(_decided(_evict(_run("w", gpus=4, at=5.0), "a/q", reclaim)), now=20.0)
    tally.observe(_decided(_evict(_run("x", gpus=1, at=0.0), "a/q", reclaim)), now=30.0)
    assert tally.lost_by_reason == {fair: 2 * 10.0, reclaim: 4 * 15.0 + 1 * 30.0}
    assert sum(tally.lost_by_reason.values()) == tally.lost_gpu_seconds
