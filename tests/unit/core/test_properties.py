"""Property tests over random clusters: the invariants every cycle must keep."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from queuemgr.core.cache import Cache
from queuemgr.core.cycle import schedule
from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    Taint,
    TaintEffect,
    Workload,
)
from queuemgr.core.node_topology import tolerated
from queuemgr.core.reasons import Decisions
from queuemgr.core.resources import ResourceName
from queuemgr.core.snapshot import Config, Snapshot, admitted_requests, build_snapshot
from queuemgr.core.verdicts import PendingReason
from tests.builders import (
    ClusterQueueBuilder,
    World,
    make_cq,
    make_flavor,
    make_nodes,
    random_borrower,
)
from tests.builders import make_workload as wl

TAINT = Taint(key="dedicated", value="x", effect=TaintEffect.NO_SCHEDULE)
SETTINGS = settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Scenario:
    config: Config
    admitted: list[AdmittedWorkload]
    pending: list[Workload]

    def snapshot(self, pending: Iterable[Workload] | None = None) -> Snapshot:
        return build_snapshot(
            self.config,
            admitted=self.admitted,
            pending=self.pending if pending is None else pending,
        )


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    flavors = [f"f{i}" for i in range(draw(st.integers(1, 3)))]
    world = World()
    tainted = draw(st.sampled_from([None, *flavors]))
    # One flavor may be tainted on the ResourceFlavor, on its nodes, or both.
    flavor_taint, node_taint = draw(st.sampled_from([(1, 1), (1, 0), (0, 1)]))
    for f in flavors:
        world.flavor(make_flavor(f, taints=[TAINT] if f == tainted and flavor_taint else []))
    for i in range(draw(st.integers(2, 8))):
        f = flavors[i] if i < len(flavors) else draw(st.sampled_from(flavors))
        world.node(
            make_nodes(
                f"n{i}",
                1,
                flavor=f,
                gpu=draw(st.sampled_from([0, 4, 8, 8, 8])),
                cpu=draw(st.sampled_from([8, 16, 32, 64])),
                labels={"zone": draw(st.sampled_from(["a", "b"]))},
                taints=[TAINT] if f == tainted and node_taint else [],
            )
        )
    n_cqs = draw(st.integers(1, 4))
    one_cohort = draw(st.integers(0, 3)) > 0
    cq_names = [f"q{i}" for i in range(n_cqs)]
    for name in cq_names:
        cohort = "c" if one_cohort and draw(st.integers(0, 4)) > 0 else None
        b: ClusterQueueBuilder = make_cq(name).cohort(cohort)
        b.weight(draw(st.sampled_from([0, 1, 1, 2, 3])))
        b.strict(draw(st.integers(0, 3)) == 0)
        order = draw(st.permutations(flavors))
        for f in order[: draw(st.integers(1, len(flavors)))]:
            gpu = draw(st.sampled_from([0, 4, 8, 8, 16, 24]))
            cpu = draw(st.sampled_from([0, 16, 64, 128, 128]))
            b.flavor(f).nominal(gpu=gpu, cpu=cpu)
            if draw(st.booleans()):
                b.borrowing_limit(gpu=draw(st.integers(0, 8)))
            if draw(st.booleans()):
                b.borrowing_limit(cpu=draw(st.sampled_from([0, 8, 64])))
            if draw(st.booleans()):
                b.lending_limit(gpu=draw(st.integers(0, gpu)))
            if draw(st.booleans()):
                b.lending_limit(cpu=draw(st.sampled_from([c for c in (0, 8, 32, 64) if c <= cpu])))
        if draw(st.integers(0, 3)) == 0:
            b.namespaces(name)
        world.cq(b)
    # Namespace "shared" also routes to the last queue, which may not admit it.
    world.lq(cq_names[-1], "default", cq_names[-1]).lq("shared", "default", cq_names[-1])
    workloads = []
    for i in range(draw(st.integers(0, 30))):
        builder = (
            wl(f"w{i:02d}")
            .ns(draw(st.sampled_from([*cq_names, "shared"])) if i % 8 != 7 else "ghost")
            .priority(draw(st.integers(0, 3)))
            .at(float(draw(st.integers(0, 5))))
        )
        if draw(st.integers(0, 4)) == 0:
            builder.selector({"zone": draw(st.sampled_from(["a", "b"]))})
        if draw(st.booleans()):
            builder.tolerate("dedicated")
        for p in range(draw(st.sampled_from([1, 1, 1, 2]))):
            builder.pod_set(
                f"ps{p}",
                draw(st.sampled_from([1, 1, 2, 3, 4])),
                gpu=draw(st.sampled_from([0, 1, 1, 2, 4, 8])),
                cpu=draw(st.sampled_from(["500m", "1", "2", "4"])),
            )
        workloads.append(builder.build())
    config = world.config()
    # Some workloads already run: a first cycle over a prefix admits them.
    split = draw(st.integers(0, len(workloads)))
    first = schedule(build_snapshot(config, admitted=(), pending=workloads[:split]), 0.0)
    running = first.admitted_ids()
    return Scenario(
        config=config,
        admitted=list(first.admitted),
        pending=[w for w in workloads if w.id not in running],
    )


# -- invariant checks ---------------------------------------------------------------


def check_quota(config: Config, held: Iterable[AdmittedWorkload]) -> None:
    usage: dict[tuple[ClusterQueueName, FlavorName, ResourceName], int] = {}
    for a in held:
        for r, v in admitted_requests(a).items():
            key = (a.admission.cluster_queue, a.admission.flavor, r)
            usage[key] = usage.get(key, 0) + v
    pool: dict[tuple[str, FlavorName, ResourceName], int] = {}
    pool_used: dict[tuple[str, FlavorName, ResourceName], int] = {}
    for cq in config.cluster_queues.values():
        for fq in cq.flavors:
            for r, nominal in fq.nominal.items():
                u = usage.pop((cq.name, fq.flavor, r), 0)
                if cq.cohort is None:
                    assert u <= nominal, (cq.name, fq.flavor, r, u, nominal)
                    continue
                if r in fq.borrowing_limit:
                    assert u <= nominal + fq.borrowing_limit[r], (cq.name, fq.flavor, r, u)
                lend = fq.lending_limit.get(r)
                guaranteed = 0 if lend is None else max(0, nominal - lend)
                pkey = (cq.cohort, fq.flavor, r)
                pool[pkey] = pool.get(pkey, 0) + nominal - guaranteed
                pool_used[pkey] = pool_used.get(pkey, 0) + max(0, u - guaranteed)
    # Whatever is left was taken without any quota covering it.
    assert all(v <= 0 for v in usage.values()), usage
    for pkey, used in pool_used.items():
        assert used <= pool[pkey], (pkey, used, pool[pkey])


def check_nodes(config: Config, held: Iterable[AdmittedWorkload]) -> None:
    free = {name: dict(n.allocatable) for name, n in config.nodes.items()}
    for a in held:
        per_pod = {ps.name: ps.requests for ps in a.workload.pod_sets}
        for p in a.admission.placements:
            for r, v in per_pod[p.pod_set].items():
                free[p.node][r] = free[p.node].get(r, 0) - v * p.count
    for name, vec in free.items():
        assert all(v >= 0 for v in vec.values()), (name, vec)


def check_gangs(config: Config, decided: Decisions) -> None:
    for a in decided.admitted:
        adm = a.admission
        flavor = config.flavors[adm.flavor]
        placed: dict[str, int] = {}
        for p in adm.placements:
            placed[p.pod_set] = placed.get(p.pod_set, 0) + p.count
            assert p.count > 0
        assert placed == {ps.name: ps.count for ps in a.workload.pod_sets}
        by_name = {ps.name: ps for ps in a.workload.pod_sets}
        for p in adm.placements:
            node = config.nodes[p.node]
            ps = by_name[p.pod_set]
            assert node.schedulable
            assert flavor.selects(node.labels)
            assert all(node.labels.get(k) == v for k, v in ps.node_selector.items())
            assert tolerated(node.taints, ps.tolerations)
            assert tolerated(flavor.taints, ps.tolerations)
        assert adm.cluster_queue == config.route(a.workload)
        assert config.cluster_queues[adm.cluster_queue].quota(adm.flavor) is not None


@SETTINGS
@given(scenarios())
def test_quota_nodes_and_gangs(sc: Scenario) -> None:
    snap = sc.snapshot()
    decided = schedule(snap, 1.0)
    held = [*snap.admitted.values(), *decided.admitted]
    check_quota(sc.config, held)
    check_nodes(sc.config, held)
    check_gangs(sc.config, decided)
    # The first cycle's own admissions kept the invariants too.
    check_quota(sc.config, snap.admitted.values())


@SETTINGS
@given(scenarios(), st.randoms(use_true_random=False))
def test_deterministic(sc: Scenario, rnd: random.Random) -> None:
    snap = sc.snapshot()
    decided = schedule(snap, 1.0)
    assert schedule(snap, 1.0) == decided
    shuffled = list(sc.pending)
    rnd.shuffle(shuffled)
    again = schedule(sc.snapshot(shuffled), 1.0)
    assert again.admitted == decided.admitted
    assert dict(again.pending) == dict(decided.pending)


@SETTINGS
@given(scenarios())
def test_every_pending_workload_is_accounted_for(sc: Scenario) -> None:
    decided = schedule(sc.snapshot(), 1.0)
    admitted = decided.admitted_ids()
    waiting = set(decided.pending)
    assert admitted.isdisjoint(waiting)
    assert admitted | waiting == {w.id for w in sc.pending}
    assert len(decided.admitted) == len(admitted)
    # Positions are 1-based and dense, in queue order, per ClusterQueue and LocalQueue.
    snap = sc.snapshot()
    for queue in snap.pending.values():
        left = [w for w in queue if w.id in waiting]
        assert [decided.pending[w.id].position_in_cluster_queue for w in left] == list(
            range(1, len(left) + 1)
        )
        per_lq: dict[tuple[str, str], int] = {}
        for w in left:
            per_lq[(w.namespace, w.queue)] = per_lq.get((w.namespace, w.queue), 0) + 1
            assert decided.pending[w.id].position_in_local_queue == per_lq[(w.namespace, w.queue)]
    for w in snap.unroutable:
        assert decided.pending[w.id].cluster_queue is None
    # A namespace its ClusterQueue does not admit is always Inadmissible.
    for name, queue in snap.pending.items():
        cq = sc.config.cluster_queues[name]
        for w in queue:
            if not cq.admits_namespace(w.namespace):
                assert decided.pending[w.id].reason is PendingReason.INADMISSIBLE


# -- no starvation of in-nominal work -------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(
    seed=st.integers(0, 2**32 - 1),
    nodes=st.integers(2, 4),
    nominal=st.integers(2, 16),
    size=st.integers(1, 8),
    pods=st.integers(1, 2),
)
def test_in_nominal_workload_is_not_starved_by_borrowers(
    seed: int, nodes: int, nominal: int, size: int, pods: int
) -> None:
    """Borrowers fill the cluster; once capacity frees, the in-nominal job goes first.

    Each cycle, the job alone on the same cluster is the oracle for "enough
    capacity is free"; whenever it would be admitted alone, it must be admitted,
    and before any borrower, even those of other queues with higher priority.
    """
    rng = random.Random(seed)
    size = min(size, nominal // pods) or 1
    pods = min(pods, nominal)
    world = World().node(make_nodes("n", nodes, flavor="h100"))
    world.cq(
        make_cq("owner").cohort("c").flavor("h100").nominal(gpu=nominal),
        make_cq("lender").cohort("c").flavor("h100").nominal(gpu=nodes * 8),
        make_cq("b1").cohort("c").flavor("h100").nominal(gpu=0),
        make_cq("b2").cohort("c").flavor("h100").nominal(gpu=0),
    )
    config = world.config()
    cache = Cache(config)
    clock = 0.0

    def borrower(i: int) -> Workload:
        return random_borrower(rng, i, clock)

    for i in range(40):
        cache.add_pending(borrower(i))
    for a in schedule(cache.snapshot(), clock).admitted:
        cache.admit(a)
    clock = 1.0
    target = wl("job").ns("owner").gang(pods).gpus(size).at(clock).build()
    cache.add_pending(target)
    counter = 40
    for cycle in range(400):
        clock += 1.0
        if cycle > 0:  # the first cycle sees the cluster the borrowers filled
            running = sorted(a.workload.id for a in cache.admitted())
            if running:
                cache.remove_admitted(rng.choice(running))
        for _ in range(rng.randint(0, 2) if cycle < 60 else 0):
            cache.add_pending(borrower(counter))  # borrowers arriving after the job
            counter += 1
        snap = cache.snapshot()
        alone = schedule(
            build_snapshot(config, admitted=snap.admitted.values(), pending=[target]), clock
        )
        decided = schedule(snap, clock)
        order = [a.workload.id for a in decided.admitted]
        if alone.admitted:
            assert order and order[0] == target.id, (order, decided.pending.get(target.id))
        else:
            assert target.id not in order
        for a in decided.admitted:
            cache.admit(a)
        if not cache.is_pending(target.id):
            event("job waited " + ("0 cycles" if cycle == 0 else "1+ cycles"))
            return
    raise AssertionError("the in-nominal job never ran")
