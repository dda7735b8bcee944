"""The burst of jobs and gangs ``queuemgr demo`` submits: deterministic for a seed.

Why it exists: the demo has to show borrowing, lending and reclaim preemption
within a minute, and the same seed must give the same burst on every machine,
so a run can be described, repeated and tested.

The plan, in seconds at speed 1 (every time is divided by ``speed``):

- at 0, team-a (nominal 8 GPUs) submits 32 GPUs of long gangs (16, 8, 4 and 4
  GPUs, 9 to 14 s): the other tenants are idle, so team-a borrows the whole
  cluster;
- at about 4 s team-b, and at about 5.5 s team-c, submit work that fits their
  own nominal quota: they reclaim it by preempting team-a's borrowed gangs;
- the rest is a seeded mix over the first ~24 s (longer for more jobs): 1-GPU
  jobs and 2-, 4-, 8- and 2x8-GPU gangs, runtimes of 2 to 9 s, tenants alike.

What must stay true: the plan is a pure function of ``(jobs, seed, speed)``
(its own ``random.Random``, no clock); names are unique and sort by arrival;
every workload has a ``max_runtime`` (the simulated backend runs it exactly
that long); every shape fits every tenant's borrowing limit, so all of them
finish. The tenants and the queue must match ``demo_cluster.yaml``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from queuemgr.core.model import PodSet, Workload
from queuemgr.core.resources import GPU

TENANTS = ("team-a", "team-b", "team-c")
QUEUE = "default"
MIN_JOBS = 10  # the fixed opening and reclaim waves, plus at least two of the mix
WINDOW = 20.0  # seconds (speed 1) over which 40 jobs of the mix arrive


@dataclass(frozen=True)
class Shape:
    name: str
    pods: int
    gpus_per_pod: int

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


JOB1 = Shape("job1", 1, 1)
GANG2 = Shape("gang2", 2, 1)
GANG4 = Shape("gang4", 2, 2)
GANG8 = Shape("gang8", 2, 4)
GANG16 = Shape("gang16", 2, 8)
# The mix: mostly small jobs, a few big gangs; (shape, weight, runtime range in s).
MIX = (
    (JOB1, 40, (2.0, 6.0)),
    (GANG2, 20, (2.0, 6.0)),
    (GANG4, 20, (3.0, 7.0)),
    (GANG8, 15, (3.0, 8.0)),
    (GANG16, 5, (4.0, 8.0)),
)


@dataclass(frozen=True, kw_only=True)
class Submission:
    at: float  # seconds after the demo starts
    namespace: str
    name: str
    shape: Shape
    runtime: float  # seconds it runs once admitted (its max_runtime)
    priority: int = 0

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"

    def workload(self, created_at: float) -> Workload:
        pod_set = PodSet(
            name="workers", count=self.shape.pods, requests={GPU: self.shape.gpus_per_pod}
        )
        return Workload(
            namespace=self.namespace,
            name=self.name,
            queue=QUEUE,
            pod_sets=(pod_set,),
            priority=self.priority,
            created_at=created_at,
            max_runtime=self.runtime,
        )


def plan(jobs: int = 40, seed: int = 0, speed: float = 1.0) -> tuple[Submission, ...]:
    """The burst: ``jobs`` submissions in arrival order, times divided by ``speed``."""
    if jobs < MIN_JOBS:
        raise ValueError(f"jobs must be at least {MIN_JOBS}, got {jobs}")
    if speed <= 0:
        raise ValueError(f"speed must be positive, got {speed}")
    rng = random.Random(seed)
    a, b, c = TENANTS
    # (at, tenant, shape, runtime) at speed 1.
    raw: list[tuple[float, str, Shape, float]] = []
    # Opening: team-a borrows the idle cluster with long gangs.
    for shape, (lo, hi) in (
        (GANG16, (10.0, 12.0)),
        (GANG8, (9.0, 11.0)),
        (GANG4, (8.0, 10.0)),
        (GANG4, (8.0, 10.0)),
    ):
        raw.append((0.0, a, shape, rng.uniform(lo, hi)))
    # Reclaim: team-b and team-c want their nominal quota back while team-a holds it.
    at_b, at_c = rng.uniform(3.5, 4.5), rng.uniform(5.0, 6.0)
    raw.append((at_b, b, GANG8, rng.uniform(5.0, 8.0)))
    raw.append((at_b, b, JOB1, rng.uniform(3.0, 6.0)))
    raw.append((at_c, c, GANG4, rng.uniform(5.0, 8.0)))
    raw.append((at_c, c, GANG2, rng.uniform(3.0, 6.0)))
    window = WINDOW * max(1.0, jobs / 40)
    shapes = [m[0] for m in MIX]
    weights = [m[1] for m in MIX]
    runtimes = {m[0]: m[2] for m in MIX}
    for _ in range(jobs - len(raw)):
        shape = rng.choices(shapes, weights)[0]
        lo, hi = runtimes[shape]
        raw.append((rng.uniform(1.0, window), rng.choice(TENANTS), shape, rng.uniform(lo, hi)))
    raw.sort(key=lambda r: r[0])  # stable: equal times keep their order
    return tuple(
        Submission(
            at=round(at / speed, 3),
            namespace=tenant,
            name=f"{shape.name}-{i:03d}",
            shape=shape,
            runtime=round(runtime / speed, 3),
        )
        for i, (at, tenant, shape, runtime) in enumerate(raw)
    )


def horizon(submissions: tuple[Submission, ...]) -> float:
    """The latest arrival plus runtime: no run of the plan can end sooner."""
    return max((s.at + s.runtime for s in submissions), default=0.0)
