"""No preemption is reversed on random cohort trees (property d of test_tree_properties.py).

test_preemption_stability.py's formulation, on trees (``reversals``): if A (queue X)
evicted B (queue Y), B does not later evict A unless the situation that let A take from
B changed in B's favour in between (both cycles included): a workload other than A was
admitted on X's side, or one other than B stopped on Y's side. A side is the subtree,
below X's and Y's lowest common ancestor, that holds the queue (the queue alone when it
sits in that ancestor itself): reclaim reads the two queues' own usage, and fair sharing
compares the shares of exactly those subtrees, each a function of its own members' usage.
This property found a real bug: with an inner cohort keeping its own quota from its
parent, fair shares divided by nothing and two queues took the same GPUs back and forth.
"""

from __future__ import annotations

from hypothesis import event, given, settings, target

from queuemgr.core.model import (
    ClusterQueueName,
    Cohort,
    CohortName,
)
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.snapshot import Config
from tests.builders import World, make_cohort, make_cq, make_nodes
from tests.builders import make_workload as wl
from tests.unit.core.tree_scenarios import (
    SETTINGS,
    Cycle,
    Scenario,
    run,
    scenarios,
)

# -- d. no preemption is reversed ----------------------------------------------------------------


def sides(config: Config, x: str, y: str) -> tuple[set[str], set[str]]:
    """The queues of X's and of Y's side: the subtrees below their lowest common ancestor
    that hold each (the queue alone if it sits in that ancestor, or if X is Y)."""
    topo = config.quota_topology
    cx, cy = (
        config.cluster_queues[ClusterQueueName(x)].cohort,
        config.cluster_queues[ClusterQueueName(y)].cohort,
    )
    if x == y or cx is None or cy is None:
        return {x}, {y}
    chain_x, chain_y = topo.tree.chain[cx], topo.tree.chain[cy]
    common = next((c for c in chain_x if c in chain_y), None)
    if common is None:
        return {x}, {y}

    def side(q: str, chain: tuple[CohortName, ...]) -> set[str]:
        at = chain.index(common)
        if at == 0:
            return {q}
        top = chain[at - 1]
        return {
            name
            for name, cq in config.cluster_queues.items()
            if cq.cohort is not None and top in topo.tree.chain[cq.cohort]
        }

    return side(x, chain_x), side(y, chain_y)


def reversals(config: Config, cycles: list[Cycle]) -> list[str]:
    """B evicting A after A evicted B, with nothing changed in B's favour in between."""
    out = []
    evictions = [(c, e) for c in cycles for e in c.evicted]
    for i, (c1, first) in enumerate(evictions):
        a, b = first.preemptor, first.victim
        x, y = first.preemptor_cq, first.victim_cq
        side_x, side_y = sides(config, x, y)
        for c2, second in evictions[i + 1 :]:
            if (second.preemptor, second.victim) != (b, a) or c2.index <= c1.index:
                continue
            window = cycles[c1.index : c2.index + 1]
            grew = any(w != a and cq in side_x for d in window for w, cq in d.admitted.items())
            shrank = any(
                w != b and cq in side_y
                for d in window
                for w, cq in [*d.finished.items(), *((v.victim, v.victim_cq) for v in d.evicted)]
            )
            if not grew and not shrank:
                out.append(
                    f"{a} ({x}) evicted {b} ({y}) at t={c1.now:g} ({first.reason}), then {b} "
                    f"evicted {a} at t={c2.now:g} ({second.reason}); meanwhile {sorted(side_x)} "
                    f"admitted nothing else and nothing else of {sorted(side_y)} stopped"
                )
    return out


@settings(SETTINGS, max_examples=150)
@given(scenarios(contended=True))
def test_no_preemption_is_reversed(sc: Scenario) -> None:
    d = run(sc, 10)
    n = sum(len(c.evicted) for c in d.cycles)
    event(f"evictions: {'0' if n == 0 else '1-2' if n <= 2 else '3-9' if n < 10 else '10+'}")
    # Steer the search towards runs whose queues take from each other (a reversal needs
    # two such evictions), fair sharing's above all (the rarest).
    across = [e.reason for c in d.cycles for e in c.evicted if e.victim_cq != e.preemptor_cq]
    target(float(len(across)), label="evictions across queues")
    target(float(across.count("InCohortFairSharing")), label="fair-sharing evictions")
    found = reversals(sc.config, d.cycles)
    assert not found, "\n".join([*found, "the run:", d.log()])


def test_sides_are_the_subtrees_below_the_common_ancestor() -> None:
    world = World().cohort(
        Cohort(name=CohortName("org")),
        Cohort(name=CohortName("a"), parent=CohortName("org")),
        Cohort(name=CohortName("a1"), parent=CohortName("a")),
        Cohort(name=CohortName("b"), parent=CohortName("org")),
    )
    for name, cohort in (("p", "a1"), ("q", "a"), ("r", "b"), ("s", "org"), ("t", "a1")):
        world.cq(make_cq(name).cohort(cohort).nominal(**{"gpu": 1}))
    config = world.config()
    assert sides(config, "p", "r") == ({"p", "q", "t"}, {"r"})
    assert sides(config, "p", "q") == ({"p", "t"}, {"q"})
    assert sides(config, "p", "t") == ({"p"}, {"t"})
    assert sides(config, "s", "p") == ({"s"}, {"p", "q", "t"})
    assert sides(config, "p", "p") == ({"p"}, {"p"})


def test_the_found_reversal_stays_fixed() -> None:
    # The case the property found, shrunk: rnd keeps its own 4 GPUs from org (lending
    # limit 0), q0 and q1 (nominal 0, weight 0) borrow them, fair sharing on. The tree's
    # lendable GPUs were counted at the root only (0), so every share was 0, every taking
    # "fair", and q0 and q1 took the same GPUs back and forth every other cycle.
    world = World().cohort(
        make_cohort("org", fair=True, weight=0),
        make_cohort(
            "rnd", "org", flavor="f0", nominal={"gpu": 4},
            borrowing_limit={"gpu": 0}, lending_limit={"gpu": 0}, fair=True, weight=0,
        ),
    )  # fmt: skip
    for name in ("q0", "q1"):
        world.cq(make_cq(name).cohort("rnd").weight(0).flavor("f0").nominal(gpu=0, cpu="32"))
    world.node(make_nodes("f0n", 1, flavor="f0", gpu=8, cpu="64"))
    pending = [wl(f"w{i:02d}").ns("q0").gpus(0).cpu("500m").build() for i in range(9)]
    pending += [
        wl("w09").ns("q0").gpus(1).cpu("500m").build(),
        wl("w10").ns("q0").gpus(2).cpu("500m").build(),
        wl("w11").ns("q1").gpus(2).cpu("500m").at(1.0).build(),
    ]
    sc = Scenario(
        config=world.config(),
        policy=SchedulerPolicy(requeue_backoff_base=0.0),
        admitted=[],
        pending=pending,
    )
    d = run(sc, 10)
    found = reversals(sc.config, d.cycles)
    assert not found, "\n".join([*found, "the run:", d.log()])
    assert sum(len(c.evicted) for c in d.cycles) <= 1
