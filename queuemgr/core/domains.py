"""Label domains (racks, NVLink domains): which of them a topology pod set fills.

Why it exists: a pod set that requires or prefers a node label key is placed
on the nodes of one value of that label (a domain) or of as few as possible
(docs/scheduling.md, "Topology-aware placement"). Choosing the domains is a
small, separately testable decision; filling their nodes is core.placement's.

What must stay true: a required topology uses one domain or fails; the domain
chosen among those that hold the pod set is the best fit (least free dominant
resource), ties by label value, unless a :class:`DomainRule` for the label says
otherwise (first in a configured order, or the most free: a multi-cluster
manager's dispatch policy over its clusters); a preferred one spans the fewest
domains. Every choice is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from queuemgr.core.domain_rules import DomainChoice, DomainRule
from queuemgr.core.model import PodSet
from queuemgr.core.resources import GPU, ResourceName

__all__ = ["DomainChoice", "DomainRule", "dominant", "plan_domains"]


def _pick(rule: DomainRule | None, free: Mapping[str, int]) -> Callable[[str], tuple[object, ...]]:
    if rule is None or rule.choice is DomainChoice.BEST_FIT:
        return lambda v: (free.get(v, 0), v)
    rank = {v: i for i, v in enumerate(rule.order)}
    last = len(rule.order)
    if rule.choice is DomainChoice.FIRST_FIT:
        return lambda v: (rank.get(v, last), v)
    return lambda v: (-free.get(v, 0), rank.get(v, last), v)


def plan_domains(
    count: int,
    room: Mapping[str, int],
    free: Mapping[str, int],
    *,
    spill: bool,
    rule: DomainRule | None = None,
) -> list[str] | None:
    """The domains to fill, in order, for ``count`` pods; None if one domain must and cannot.

    One domain holds them: the one with the least free dominant resource (best fit,
    ties by value), or the one ``rule`` picks. Otherwise, with ``spill`` (a preferred
    topology), as few domains as possible: while no single domain holds the rest, the
    one with the most room; then the best fit for the rest. Without ``spill`` (a
    required topology) that is a failure. Should the domains together hold too little,
    all are listed.
    """
    fits = [v for v, n in room.items() if n >= count]
    if fits:
        return [min(fits, key=_pick(rule, free))]
    if not spill:
        return None
    plan: list[str] = []
    left = sorted((v for v, n in room.items() if n > 0), key=lambda v: (-room[v], v))
    rest = count
    while rest > 0 and left:
        fits = [v for v in left if room[v] >= rest]
        pick = min(fits, key=lambda v: (free.get(v, 0), v)) if fits else left[0]
        plan.append(pick)
        left.remove(pick)
        rest -= room[pick]
    return plan


def dominant(ps: PodSet) -> ResourceName | None:
    """The resource that sizes a domain for ``ps``: GPUs if asked for, else the first by name."""
    if ps.node_requests.get(GPU, 0) > 0:
        return GPU
    return min((r for r, v in ps.node_requests.items() if v > 0), default=None)
