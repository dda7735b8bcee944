"""Small random worlds of one cohort for preemption properties (see their users).

2-3 ClusterQueues of one cohort (fair sharing on or off) whose nominal quotas add up to
the cluster (2-4 nodes of 8 GPUs), borrowing allowed, reclaim ``Any``/``LowerPriority``
and within-queue ``LowerPriority``/``Never``; single pods of 1-8 GPUs and gangs of 2-3
whole nodes, priorities 0-2, staggered submissions, runtimes of 10-500 s and often a
``max_runtime``; a third of the queues lend only to declared runtimes of 50-400 s
(``borrowing_max_runtime``). Every workload fits the empty cluster.
"""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple

from hypothesis import strategies as st

from queuemgr.core.model import Cohort, CohortName, ReclaimWithinCohort, WithinClusterQueue
from queuemgr.core.snapshot import Config
from queuemgr.spec.scenario import SimWorkload
from tests.builders import World, make_cq, make_nodes, make_workload

GPUS_PER_NODE = 8


class Queue(NamedTuple):
    nominal: int  # GPUs; cpu and memory quota in proportion
    reclaim: str
    within: str
    borrow_limit: int | None = None  # borrowing_max_runtime, seconds


class Job(NamedTuple):
    q: int  # index of its queue
    pods: int
    gpus: int  # per pod
    prio: int
    at: int
    runtime: int
    limit: int | None  # max_runtime
    copies: int = 1  # submitted ``every`` seconds apart
    every: int = 0


class Spec(NamedTuple):
    nodes: int
    fair: bool
    queues: tuple[Queue, ...]
    jobs: tuple[Job, ...]


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    nodes = draw(st.integers(2, 4))
    total = GPUS_PER_NODE * nodes
    n_queues = draw(st.integers(2, 3))
    # Nominal quotas in steps of 4 GPUs that add up to the cluster.
    cuts = sorted(
        draw(st.lists(st.integers(0, total // 4), min_size=n_queues - 1, max_size=n_queues - 1))
    )
    bounds = [0, *(4 * c for c in cuts), total]
    queues = tuple(
        Queue(
            nominal=hi - lo,
            reclaim=draw(
                st.sampled_from(
                    [ReclaimWithinCohort.ANY.value, ReclaimWithinCohort.LOWER_PRIORITY.value]
                )
            ),
            within=draw(
                st.sampled_from(
                    [WithinClusterQueue.LOWER_PRIORITY.value, WithinClusterQueue.NEVER.value]
                )
            ),
            borrow_limit=draw(st.one_of(st.none(), st.none(), st.integers(50, 400))),
        )
        for lo, hi in pairwise(bounds)
    )
    jobs = []
    for _ in range(draw(st.integers(2, 8))):
        if draw(st.integers(0, 3)) == 0:  # a gang of whole nodes; it fits the empty cluster
            pods, gpus = draw(st.integers(2, min(3, nodes))), GPUS_PER_NODE
        else:
            pods, gpus = 1, draw(st.one_of(st.just(GPUS_PER_NODE), st.integers(1, GPUS_PER_NODE)))
        runtime = draw(st.integers(10, 500))
        limit = draw(
            st.one_of(
                st.none(),
                st.integers(runtime, runtime + 200),
                st.integers(5, runtime - 1),
            )
        )
        q = draw(st.integers(0, n_queues - 1))
        cap = queues[q].borrow_limit
        if cap is not None and pods * gpus > queues[q].nominal and (limit is None or limit > cap):
            limit = cap  # it must borrow, so it declares a runtime its queue lends to
        jobs.append(
            Job(
                q=q,
                pods=pods,
                gpus=gpus,
                prio=draw(st.integers(0, 2)),
                at=draw(st.integers(0, 60)),
                runtime=runtime,
                limit=limit,
                copies=draw(st.integers(1, 4)),
                every=draw(st.integers(5, 30)),
            )
        )
    return Spec(nodes=nodes, fair=draw(st.booleans()), queues=queues, jobs=tuple(jobs))


def build(spec: Spec) -> tuple[Config, list[SimWorkload]]:
    world = World()
    for i, q in enumerate(spec.queues):
        world.cq(
            make_cq(f"q{i}")
            .cohort("c")
            .nominal(gpu=q.nominal, cpu=8 * q.nominal, memory=f"{64 * q.nominal}Gi")
            .preempt(within=q.within, reclaim=q.reclaim)
            .borrowing_max_runtime(None if q.borrow_limit is None else float(q.borrow_limit))
        )
    world.cohorts = [Cohort(name=CohortName("c"), fair_sharing=spec.fair)]
    world.node(make_nodes("n", spec.nodes, gpu=GPUS_PER_NODE, cpu="64", memory="512Gi"))
    workloads = [
        SimWorkload(
            workload=make_workload(f"w{k}" if job.copies == 1 else f"w{k}-{j}")
            .ns(f"q{job.q}")
            .gang(job.pods)
            .gpus(job.gpus)
            .cpu(4 * job.gpus)
            .memory(f"{32 * job.gpus}Gi")
            .priority(job.prio)
            .at(float(job.at + j * job.every))
            .max_runtime(None if job.limit is None else float(job.limit))
            .build(),
            runtime=float(job.runtime),
        )
        for k, job in enumerate(spec.jobs)
        for j in range(job.copies)
    ]
    return world.config(), workloads
