"""The demo's burst: deterministic for a seed, and shaped so that reclaim must happen."""

from __future__ import annotations

from importlib import resources

import pytest

from queuemgr.controller.simulated import load_cluster_file
from queuemgr.core.resources import GPU
from queuemgr.demo.burst import MIN_JOBS, QUEUE, TENANTS, horizon, plan


def test_the_same_seed_gives_the_same_burst() -> None:
    assert plan(40, seed=7) == plan(40, seed=7)
    assert plan(40, seed=7) != plan(40, seed=8)


def test_speed_divides_every_time() -> None:
    slow, fast = plan(40, seed=3), plan(40, seed=3, speed=4)
    assert [s.name for s in slow] == [s.name for s in fast]
    for s, f in zip(slow, fast, strict=True):
        assert f.at == pytest.approx(s.at / 4, abs=1e-3)
        assert f.runtime == pytest.approx(s.runtime / 4, abs=1e-3)


@pytest.mark.parametrize("seed", range(5))
def test_names_are_unique_and_follow_arrival_order(seed: int) -> None:
    burst = plan(60, seed=seed)
    assert len(burst) == 60
    assert len({s.id for s in burst}) == 60
    assert [s.at for s in burst] == sorted(s.at for s in burst)
    assert [s.name[-3:] for s in burst] == [f"{i:03d}" for i in range(60)]


@pytest.mark.parametrize("seed", range(5))
def test_team_a_borrows_the_cluster_before_the_others_reclaim_it(seed: int) -> None:
    burst = plan(40, seed=seed)
    opening = [s for s in burst if s.at == 0]
    assert {s.namespace for s in opening} == {"team-a"}
    assert sum(s.shape.gpus for s in opening) == 32  # the whole cluster, 24 of it borrowed
    # team-b and team-c ask for work within their nominal quota (12 each) while
    # every opening gang still runs: a reclaim preemption has to happen.
    first_end = min(s.runtime for s in opening)
    claims = [s for s in burst if s.namespace != "team-a" and s.at < first_end]
    assert {"team-b", "team-c"} <= {s.namespace for s in claims}
    assert min(s.shape.gpus for s in claims) <= 12


def test_every_workload_is_a_gang_with_a_runtime_that_fits_the_demo_cluster() -> None:
    with resources.as_file(resources.files("queuemgr.demo") / "demo_cluster.yaml") as path:
        config = load_cluster_file(path)
    assert {ns for ns, _ in config.local_queues} == set(TENANTS)
    assert {name for _, name in config.local_queues} == {QUEUE}
    largest_node = max(n.allocatable[GPU] for n in config.nodes.values())
    shapes = set()
    for s in plan(200, seed=1):
        w = s.workload(created_at=100.0)
        assert w.max_runtime == s.runtime > 0
        assert w.created_at == 100.0 and w.queue == QUEUE
        assert s.shape.gpus_per_pod <= largest_node
        shapes.add(s.shape.gpus)
    assert shapes == {1, 2, 4, 8, 16}


def test_the_horizon_is_the_latest_end_of_the_plan() -> None:
    burst = plan(40, seed=0)
    assert horizon(burst) == max(s.at + s.runtime for s in burst)
    assert 15 < horizon(burst) < 60


@pytest.mark.parametrize(("jobs", "speed"), [(MIN_JOBS - 1, 1.0), (40, 0.0), (40, -1.0)])
def test_bad_arguments_are_refused(jobs: int, speed: float) -> None:
    with pytest.raises(ValueError):
        plan(jobs, seed=0, speed=speed)
