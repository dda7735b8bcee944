"""Random cohort trees for the property tests: scenarios, a from-scratch quota checker,
and a driver that runs several cycles on a cache (tests/unit/core/test_tree_*.py).

Why it exists: the tree properties (quota at every level, determinism, no starvation,
no reversed preemption) share one generator of trees, queues and workloads, and one
independent reading of the tree's quota constraints; none of it uses the core's quota
code, so a bug there cannot hide in the checker.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from queuemgr.core.cache import Cache
from queuemgr.core.claims import Claim
from queuemgr.core.cycle import schedule
from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FlavorName,
    FlavorQuota,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
    WorkloadId,
)
from queuemgr.core.policy import PreemptorAdmission, SchedulerPolicy
from queuemgr.core.reasons import Decisions, Eviction
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.core.snapshot import Config, Snapshot, admitted_requests, build_snapshot
from tests.builders import World, make_cq, make_nodes
from tests.builders import make_workload as wl
from tests.unit.sim.test_preemption_stability import Cycle, Evicted

SETTINGS = settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.too_slow])
COHORT_NAMES = [CohortName(n) for n in ("org", "rnd", "prd", "ml", "cv", "x1", "x2")]
# Workloads are created at t = 0..5; the first cycle admits a prefix at START, after all
# of them, so that fair sharing may take those runs (only runs admitted since the
# preemptor started waiting are its victims); the cycles under test follow.
START = 5.0
NOW = START + 1.0
RECLAIM = list(ReclaimWithinCohort)
RECLAIM_CONTENDED = [*RECLAIM, ReclaimWithinCohort.ANY]
# Both ways a preemptor gets in; victims queue again at once (no backoff), the hardest
# case for a reversal.
POLICIES = [
    SchedulerPolicy(requeue_backoff_base=0.0),
    SchedulerPolicy(requeue_backoff_base=0.0, preemptor_admission=PreemptorAdmission.SAME_CYCLE),
]


# -- random trees ------------------------------------------------------------------------


def _limit(
    draw: st.DrawFn, values: Sequence[int], *, often: bool = False
) -> dict[ResourceName, int]:
    """A GPU amount from ``values``, one time in three (in two if ``often``), else none."""
    if draw(st.integers(0, 1 if often else 2)) == 0:
        return {GPU: draw(st.sampled_from(values))}
    return {}


@st.composite
def tree_shapes(
    draw: st.DrawFn, names: Sequence[CohortName], *, one_root: bool = False
) -> dict[CohortName, CohortName | None]:
    """Each cohort's parent: a spine of 1 to 4 levels, then up to 3 more cohorts hung
    above its last level (or, unless ``one_root``, as roots of their own). The names are
    drawn in any order: name order must not matter."""
    depth = draw(st.integers(1, 4))
    names = draw(st.permutations(names))
    parents: dict[CohortName, CohortName | None] = {}
    level: dict[CohortName, int] = {}
    for i in range(depth):
        parents[names[i]] = names[i - 1] if i else None
        level[names[i]] = i
    for name in names[depth : depth + draw(st.integers(0, 3))]:
        above = [c for c in parents if level[c] < depth - 1]
        choices = above if one_root and above else [None, *above]
        parent = draw(st.sampled_from(choices)) if choices else None
        if one_root and parent is None:
            parent = names[0]
        parents[name] = parent
        level[name] = 0 if parent is None else level[parent] + 1
    return parents


@st.composite
def cohort_trees(
    draw: st.DrawFn, flavors: Sequence[str], *, one_root: bool = False, fair: int = 5
) -> list[Cohort]:
    """A spine of 1 to 4 levels and a few more cohorts hung above its last level (or, unless
    ``one_root``, as roots of their own). Each has a weight (0 included), fair sharing
    ``fair`` times in ten, and perhaps quota of its own with borrowing and lending limits
    on each flavor."""
    parents = draw(tree_shapes(COHORT_NAMES, one_root=one_root))
    cohorts = []
    for name, parent in parents.items():
        own = []
        for f in flavors:
            if draw(st.integers(0, 3)):
                own.append(
                    FlavorQuota(
                        flavor=FlavorName(f),
                        nominal=_limit(draw, [0, 4, 8]),
                        # Limits bind most often on a subtree that borrows little.
                        borrowing_limit=_limit(draw, [0, 0, 2, 4, 8], often=True),
                        lending_limit=_limit(draw, [0, 2, 4, 8]),
                    )
                )
        cohorts.append(
            Cohort(
                name=name,
                parent=parent,
                flavors=tuple(own),
                weight=Fraction(draw(st.sampled_from([0, 1, 1, 2, 3]))),
                fair_sharing=draw(st.integers(0, 9)) < fair,
            )
        )
    return cohorts


@dataclass
class Scenario:
    config: Config
    policy: SchedulerPolicy
    admitted: list[AdmittedWorkload]
    pending: list[Workload]
    # For runs of several cycles: which running workloads finish when.
    seed: int = 0
    finish_rate: int = 0  # in [0, 3]: runs finishing per cycle at most

    def snapshot(self, pending: Iterable[Workload] | None = None) -> Snapshot:
        snap = build_snapshot(
            self.config,
            admitted=self.admitted,
            pending=self.pending if pending is None else pending,
        )
        return dataclasses.replace(snap, policy=self.policy)


@st.composite
def scenarios(draw: st.DrawFn, *, contended: bool = False) -> Scenario:
    """A random tree, queues, nodes and workloads, some of them running.

    ``contended``: one tree holds every queue, there is more work than room, and
    queues reclaim more often, so that queues take from each other's runs.
    """
    flavors = [f"f{i}" for i in range(draw(st.integers(1, 2)))]
    world = World()
    cohorts = draw(cohort_trees(flavors, one_root=contended, fair=8 if contended else 5))
    world.cohort(*cohorts)
    # Nodes enough for every quota, or not.
    for i, f in enumerate(flavors):
        world.node(
            make_nodes(f"{f}n", draw(st.integers(0 if i else 1, 4)), flavor=f, gpu=8, cpu=64)
        )
    # Queues sit deeper more often: the levels above them are what this is about.
    parent_of = {c.name: c.parent for c in cohorts}

    def depth_of(c: CohortName) -> int:
        up = parent_of[c]
        return 0 if up is None else 1 + depth_of(up)

    places = [c.name for c in cohorts for _ in range(1 + depth_of(c.name))]
    cq_names = [f"q{i}" for i in range(draw(st.integers(2, 5)))]
    for name in cq_names:
        cohort = draw(st.sampled_from([*([] if contended else [None]), *places]))
        b = make_cq(name).cohort(cohort)
        b.weight(draw(st.sampled_from([0, 1, 1, 2, 3])))
        b.preempt(
            within=draw(st.sampled_from(list(WithinClusterQueue))).value,
            reclaim=draw(st.sampled_from(RECLAIM_CONTENDED if contended else RECLAIM)).value,
        )
        order = draw(st.permutations(flavors))
        for f in order[: draw(st.integers(1, len(flavors)))]:
            gpu = draw(st.sampled_from([0, 0, 0, 4, 8, 16] + [0, 4] * contended))
            b.flavor(f).nominal(gpu=gpu, cpu=draw(st.sampled_from([32, 64, 128])))
            if draw(st.integers(0, 2)) == 0:
                b.borrowing_limit(gpu=draw(st.integers(0, 8)))
            if draw(st.integers(0, 2)) == 0:
                b.lending_limit(gpu=draw(st.integers(0, gpu)))
        world.cq(b)
    workloads = []
    for i in range(draw(st.integers(12 if contended else 4, 30))):
        builder = (
            wl(f"w{i:02d}")
            .ns(draw(st.sampled_from(cq_names)))
            .priority(draw(st.integers(0, 3)))
            .at(float(draw(st.integers(0, 5))))
            .gang(draw(st.sampled_from([1, 1, 2, 3])))
            .gpus(draw(st.sampled_from([0, 1, 2, 2, 4, 8])))
            .cpu(draw(st.sampled_from(["500m", "1", "4"])))
        )
        workloads.append(builder.build())
    config = world.config()
    policy = draw(st.sampled_from(POLICIES))
    # Some workloads already run: a first cycle over a prefix admits them.
    split = draw(st.integers(0, len(workloads)))
    first_snap = dataclasses.replace(
        build_snapshot(config, admitted=(), pending=workloads[:split]), policy=policy
    )
    first = schedule(first_snap, START)
    running = first.admitted_ids()
    # Pending work gets higher priorities than what runs, so that there is something to take.
    pending = [
        dataclasses.replace(w, priority=w.priority + draw(st.integers(0, 3)))
        for w in workloads
        if w.id not in running
    ]
    return Scenario(
        config=config,
        policy=policy,
        admitted=list(first.admitted),
        pending=pending,
        seed=draw(st.integers(0, 2**16)),
        finish_rate=draw(st.integers(0, 3)),
    )


# -- quota at every level, from scratch ----------------------------------------------------

Key = tuple[FlavorName, ResourceName]


def tree_quota_violations(config: Config, held: Iterable[AdmittedWorkload]) -> list[str]:
    """Every quota constraint of the tree that ``held`` breaks, recomputed from the config.

    Per queue: nothing held without quota listed for it, no more than nominal without a
    cohort, no more than nominal + borrowing limit. Per cohort c and key:
    ``subtree(c) = own(c) + sum over children k of (subtree(k) - guaranteed(k))`` and
    ``use(c) = sum over children k of max(0, use(k) - guaranteed(k))``, where a queue's
    subtree is its nominal quota and its use its usage, and
    ``guaranteed(n) = max(0, subtree(n) - lending_limit(n))`` (0 without one); a root
    uses at most its subtree, and a cohort with borrowing limit b takes at most
    ``subtree - guaranteed + b`` from its parent: ``max(0, use - guaranteed)``.
    """
    usage: dict[tuple[ClusterQueueName, FlavorName], dict[ResourceName, int]] = {}
    for a in held:
        vec = usage.setdefault((a.admission.cluster_queue, a.admission.flavor), {})
        for r, v in admitted_requests(a).items():
            vec[r] = vec.get(r, 0) + v
    out: list[str] = []
    keys: set[Key] = set()
    for (q, f), vec in usage.items():
        cq = config.cluster_queues[q]
        fq = cq.quota(f)
        for r, v in vec.items():
            keys.add((f, r))
            if v <= 0:
                continue
            if fq is None or r not in fq.nominal:
                out.append(f"{q} holds {v} {r} on {f} without quota for it")
            elif cq.cohort is None and v > fq.nominal[r]:
                out.append(f"{q} (no cohort) holds {v} {r} on {f} > nominal {fq.nominal[r]}")
            elif r in fq.borrowing_limit and v > fq.nominal[r] + fq.borrowing_limit[r]:
                out.append(f"{q} holds {v} {r} on {f} > nominal + borrowing limit")
    cohorts = config.cohorts
    children: dict[CohortName, list[CohortName]] = {c: [] for c in cohorts}
    members: dict[CohortName, list[ClusterQueue]] = {c: [] for c in cohorts}
    for c in cohorts.values():
        if c.parent is not None:
            children[c.parent].append(c.name)
    for cq in config.cluster_queues.values():
        if cq.cohort is not None:
            members[cq.cohort].append(cq)

    def own(c: CohortName, key: Key, what: str) -> int | None:
        for fq in cohorts[c].flavors:
            if fq.flavor == key[0]:
                amounts: Mapping[ResourceName, int] = getattr(fq, what)
                return amounts.get(key[1])
        return None

    def walk(c: CohortName, key: Key) -> tuple[int, int]:
        subtree, use = own(c, key, "nominal") or 0, 0
        for cq in members[c]:
            fq = cq.quota(key[0])
            nominal = 0 if fq is None else fq.nominal.get(key[1], 0)
            lend = None if fq is None else fq.lending_limit.get(key[1])
            g = 0 if lend is None else max(0, nominal - lend)
            subtree += nominal - g
            use += max(0, usage.get((cq.name, key[0]), {}).get(key[1], 0) - g)
        for k in children[c]:
            s, u = walk(k, key)
            lend = own(k, key, "lending_limit")
            g = 0 if lend is None else max(0, s - lend)
            b = own(k, key, "borrowing_limit")
            if b is not None and max(0, u - g) > s - g + b:
                out.append(
                    f"cohort {k} takes {max(0, u - g)} {key[1]} on {key[0]} from its parent, "
                    f"beyond subtree {s} - guaranteed {g} + borrowing limit {b}"
                )
            subtree += s - g
            use += max(0, u - g)
        return subtree, use

    for root in sorted(c for c, co in cohorts.items() if co.parent is None):
        for key in sorted(keys):
            s, u = walk(root, key)
            if u > s:
                out.append(f"root {root} uses {u} {key[1]} on {key[0]}, beyond its subtree {s}")
    return out


def claimed(claims: Iterable[Claim], now: float) -> list[AdmittedWorkload]:
    """The room standing claims hold, as if their workloads ran there."""
    return [
        AdmittedWorkload(workload=c.workload, admission=c.admission, admitted_at=now)
        for c in claims
    ]


# -- several cycles on the incremental cache, as the simulator applies them ------------------


@dataclass
class Driver:
    """A cache, its standing claims, and what each cycle decided (the engine's rules:
    victims stop at once and queue again at once, one eviction more, waiting from now)."""

    config: Config
    policy: SchedulerPolicy
    cache: Cache = field(init=False)
    claims: dict[WorkloadId, Claim] = field(default_factory=dict)
    cycles: list[Cycle] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cache = Cache(self.config, self.policy)

    def snapshot(self) -> Snapshot:
        return dataclasses.replace(self.cache.snapshot(), claims=dict(self.claims))

    def step(self, now: float, finish: Iterable[WorkloadId] = ()) -> Decisions:
        finished: dict[str, str] = {}
        for wid in finish:
            finished[wid] = self.cache.remove_admitted(wid).admission.cluster_queue
        decided = schedule(self.snapshot(), now)
        self.apply(decided, now)
        self.cycles.append(
            Cycle(
                index=len(self.cycles),
                now=now,
                admitted={a.workload.id: a.admission.cluster_queue for a in decided.admitted},
                evicted=[
                    Evicted(
                        victim=e.victim.workload.id,
                        victim_cq=e.victim.admission.cluster_queue,
                        preemptor=e.preemptor,
                        preemptor_cq=e.preemptor_cluster_queue,
                        reason=e.reason.value,
                    )
                    for e in decided.evicted
                ],
                finished=finished,
            )
        )
        return decided

    def apply(self, decided: Decisions, now: float) -> None:
        for wid in decided.released_claims:
            self.claims.pop(wid, None)
        for c in decided.claims:
            self.claims[c.workload.id] = c
        requeued = []
        for item in decided.log:
            if isinstance(item, Eviction):
                gone = self.cache.remove_admitted(item.victim.workload.id).workload
                requeued.append(
                    dataclasses.replace(gone, evictions=gone.evictions + 1, queued_at=now)
                )
            else:
                self.claims.pop(item.workload.id, None)
                self.cache.admit(item)
        for w in requeued:
            self.cache.add_pending(w)

    def log(self) -> str:
        lines = []
        for c in self.cycles:
            parts = [f"finished {sorted(c.finished)}"] if c.finished else []
            parts += [f"evict {e.victim} for {e.preemptor} ({e.reason})" for e in c.evicted]
            parts += [f"admit {w}" for w in c.admitted]
            if parts:
                lines.append(f"  cycle {c.index} t={c.now:g}: " + "; ".join(parts))
        return "\n".join(lines)


def run(sc: Scenario, cycles: int, check: bool = False) -> Driver:
    """``cycles`` cycles from the scenario, a few random runs finishing before each."""
    d = Driver(sc.config, sc.policy)
    for a in sc.admitted:
        d.cache.add_admitted(a)
    for w in sc.pending:
        d.cache.add_pending(w)
    rng = random.Random(sc.seed)
    for i in range(cycles):
        running = sorted(a.workload.id for a in d.cache.admitted())
        done = rng.sample(running, min(len(running), rng.randint(0, sc.finish_rate)))
        d.step(START + 1.0 + i, done if i else [])
        if check:
            held = [*d.cache.admitted(), *claimed(d.claims.values(), START + 1.0 + i)]
            found = tree_quota_violations(sc.config, held)
            assert not found, "\n".join([*found, "the run:", d.log()])
    return d


# -- a. quota at every level ----------------------------------------------------------------


# More examples than the others: a limit binds below the root in a few percent of trees.
