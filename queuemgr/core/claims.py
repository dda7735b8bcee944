"""Claims: the room a preemptor freed is its own until it is admitted.

Why it exists: a preemptor evicts its victims in one cycle and, because pods
take time to stop, is admitted in a later one (``after_victims_stop``). Left
unprotected, the freed quota and nodes go to whoever comes first in the next
cycle, the victims included, and the preemptor evicts again: a ping-pong. A
claim records what the preemptor was promised (its flavor, its placement and
its victims); the store keeps it with the workload, so it survives a
failover, and every cycle holds the claimed room before anything else.

What must stay true: a claim holds exactly its admission's quota and node
capacity; only its own workload is ever admitted onto it; it ends when that
workload is admitted, or when it stops waiting (cancelled, inadmissible, or
the claimed room is no longer there, for instance a node went away). The room
is quota and node capacity only: whether the workload may borrow was settled
when the claim was made, so its own queue's later borrowers never end it.
"""

from __future__ import annotations

from dataclasses import dataclass

from queuemgr.core.model import Admission, NodeName, Workload, WorkloadId
from queuemgr.core.placement import NodePool
from queuemgr.core.resources import ResourceName, format_moment


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """``workload`` was promised ``admission`` once ``victims`` have stopped."""

    workload: Workload
    admission: Admission
    victims: tuple[WorkloadId, ...]
    made_at: float

    def describe(self, stopping: frozenset[WorkloadId]) -> str:
        nodes = ", ".join(sorted({p.node for p in self.admission.placements}))
        running = [v for v in self.victims if v in stopping]
        left = f"still stopping: {', '.join(running)}" if running else "all have stopped"
        return (
            f"claims {nodes} on {self.admission.flavor} since {format_moment(self.made_at)}, "
            f"freed by preempting {', '.join(self.victims)} ({left})"
        )


def placement_fits(pool: NodePool, workload: Workload, admission: Admission) -> bool:
    """Whether every node of ``admission`` has room for the pods placed on it."""
    per_pod = {ps.name: ps.node_requests for ps in workload.pod_sets}
    need: dict[NodeName, dict[ResourceName, int]] = {}
    for p in admission.placements:
        vec = need.setdefault(p.node, {})
        for r, v in per_pod[p.pod_set].items():
            vec[r] = vec.get(r, 0) + v * p.count
    for node, vec in need.items():
        if pool.topology.flavor_of.get(node) != admission.flavor:
            return False  # the node is gone, or no longer schedulable for the flavor
        free = pool.free(node)
        if any(free.get(r, 0) < v for r, v in vec.items() if v):
            return False
    return True
