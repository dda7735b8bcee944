"""The invariant checker is not vacuous: hand-made bad admissions are caught."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from queuemgr.core.cache import Cache
from queuemgr.core.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    NodeName,
    PodSetPlacement,
    Toleration,
)
from queuemgr.sim.invariants import InvariantChecker
from queuemgr.spec.scenario import parse_scenario

RAW: dict[str, Any] = {
    "flavors": [{"name": "gpu"}],
    "nodes": [{"name": "n", "count": 2, "flavor": "gpu", "allocatable": {"nvidia.com/gpu": 8}}],
    "cluster_queues": [
        {"name": "a", "resources": [{"flavor": "gpu", "nominal": {"nvidia.com/gpu": 8}}]}
    ],
    "local_queues": [{"namespace": "a", "name": "default", "cluster_queue": "a"}],
    "workloads": [
        {
            "name": "w",
            "namespace": "a",
            "queue": "default",
            "runtime": 1,
            "pod_sets": [{"name": "p", "count": 2, "requests": {"nvidia.com/gpu": 8}}],
        }
    ],
}


def admitted(*placements: tuple[str, int]) -> tuple[Cache, InvariantChecker, AdmittedWorkload]:
    scenario = parse_scenario(RAW)
    w = scenario.workloads[0].workload
    a = AdmittedWorkload(
        workload=w,
        admission=Admission(
            workload=w.id,
            cluster_queue=ClusterQueueName("a"),
            flavor=FlavorName("gpu"),
            placements=tuple(
                PodSetPlacement(pod_set="p", node=NodeName(n), count=c) for n, c in placements
            ),
        ),
        admitted_at=0,
    )
    cache = Cache(scenario.config)
    cache.add_admitted(a)
    return cache, InvariantChecker(scenario.config), a


def test_a_partial_gang_is_caught() -> None:
    _cache, checker, a = admitted(("n-0", 1))
    checker.check_admission(a)
    assert any("placed 1 of 2 pods" in v for v in checker.violations)


def test_overcommit_and_quota_are_caught() -> None:
    cache, checker, a = admitted(("n-0", 2))
    checker.check_admission(a)
    checker.check_state(cache.admitted(), cache.snapshot())
    assert checker.violations == [
        "node n-0: nvidia.com/gpu over-committed by 8",
        "ClusterQueue a flavor gpu: nvidia.com/gpu 16 exceeds nominal 8 (no cohort)",
    ]


def test_cache_drift_is_caught() -> None:
    cache, checker, _a = admitted(("n-0", 1), ("n-1", 1))
    snapshot = cache.snapshot()
    checker.check_state([], snapshot)  # the cache holds a, the recount does not
    assert any("cache's free" in v for v in checker.violations)
    assert any("cache's usage" in v for v in checker.violations)


def test_a_node_tolerated_by_the_flavors_tolerations_is_no_violation() -> None:
    """The nodes are tainted; the pod set tolerates nothing, the flavor tolerates the taint:
    a placement there is what node fit does, not a breach. Without the flavor's
    toleration it is one."""
    raw = copy.deepcopy(RAW)
    raw["nodes"][0]["taints"] = [{"key": "spot", "effect": "NoSchedule"}]
    config = parse_scenario(raw).config
    spot = Toleration(key="spot", operator="Exists")
    flavor = dataclasses.replace(config.flavors[FlavorName("gpu")], tolerations=(spot,))
    tolerant = dataclasses.replace(config, flavors={flavor.name: flavor})
    _cache, _checker, a = admitted(("n-0", 1), ("n-1", 1))
    for cfg, violations in ((tolerant, 0), (config, 2)):
        checker = InvariantChecker(cfg)
        checker.check_admission(a)
        assert len(checker.violations) == violations, checker.violations
        assert all("does not tolerate" in v for v in checker.violations)
