"""The scheduler's global knobs, the scenario's and the service's ``scheduler:`` key.

Why it exists: a policy choice must reach the pure cycle through its input,
never through a global, so that the same snapshot still gives the same
decisions. Every knob has a default that matches Kueue's behaviour, except
``reservation_depth`` (1: the best-ranked blocked gang is protected from
starvation, as the policies issue asks; 0 restores Kueue's behaviour).

What must stay true: knobs are plain values (frozen); a default policy
changes nothing about the cycle's rules described in docs/scheduling.md.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from queuemgr.core.domain_rules import DomainRule
from queuemgr.core.fairshare import DEFAULT_WEIGHTS
from queuemgr.core.model import Ordering as Ordering  # re-exported: the knob's values
from queuemgr.core.resources import ResourceName


class PreemptorAdmission(enum.Enum):
    # Evict and admit at one instant (a model only: no real cluster stops pods at once).
    SAME_CYCLE = "same_cycle"
    # The default, and the only one the service runs: the preemptor claims the room
    # its victims free and is admitted in a later cycle, once they have stopped.
    AFTER_VICTIMS_STOP = "after_victims_stop"


class OverrunPolicy(enum.Enum):
    # A run past its max_runtime goes on; its end becomes unknown to the planner.
    EXTEND = "extend"
    # A run is stopped at its max_runtime (finished, reason MaxRuntimeExceeded).
    EVICT = "evict"


@dataclass(frozen=True, kw_only=True, slots=True)
class SchedulerPolicy:
    preemptor_admission: PreemptorAdmission = PreemptorAdmission.AFTER_VICTIMS_STOP
    # An evicted workload waits ``base * 2^(n-1)`` seconds (at most ``max``) after
    # its n-th eviction before it is tried again, as Kueue's requeuing strategy
    # does; 0 turns the backoff off.
    requeue_backoff_base: float = 60.0
    requeue_backoff_max: float = 3600.0
    # The simulator only: seconds a victim's pods take to stop after its eviction
    # (the service waits for the real pods). 0: they are gone by the next cycle,
    # as with ``serve --backend simulated``, whose stop is immediate.
    victim_stop_delay: float = 0.0
    # How many blocked workloads per cycle get a reservation (0: no backfill guard,
    # Kueue's behaviour; 1, the default: Slurm's EASY backfill; more: closer to
    # conservative backfill).
    reservation_depth: int = 1
    # How many of the largest pending workloads (most GPUs first, ties in queue
    # order) get a reservation before the cycle admits anything, starting now if
    # they fit (0, the default: none). A big gang otherwise gets a reservation only
    # when it is among the first blocked of the fair-share order, which a busy
    # tenant's gang rarely is; and what a reservation drained for it each cycle
    # goes to whoever comes first in that order.
    largest_reservations: int = 0
    # Only workloads asking for at least this many GPUs count as largest (0: any).
    # Set above one node's GPUs, it keeps the knob to multi-node gangs, the ones that
    # need several nodes drained at once; single-node jobs find a node as others end.
    largest_min_gpus: int = 0
    overrun_policy: OverrunPolicy = OverrunPolicy.EXTEND
    # ``fifo``: priority, then creation. ``usage``: LocalQueues with less decayed
    # usage (per their ClusterQueue's weight) go first, within a queue and among
    # a cohort's borrowers. A ClusterQueue's or cohort's own ``ordering`` wins.
    ordering: Ordering = Ordering.FIFO
    usage_half_life: float = 7 * 24 * 3600.0  # seconds
    usage_resource_weights: Mapping[ResourceName, float] = field(
        default_factory=lambda: dict(DEFAULT_WEIGHTS)
    )
    # How a required topology's domain is chosen, per node label (default: best fit).
    # A multi-cluster manager sets one for queuemgr.io/cluster from its dispatch policy.
    domain_rules: tuple[DomainRule, ...] = ()

    def requeue_delay(self, evictions: int) -> float:
        """Seconds an evicted workload waits before its next try, after ``evictions`` of them."""
        if evictions <= 0 or self.requeue_backoff_base <= 0:
            return 0.0
        # Capped before the power can overflow: 2^60 seconds is past any max.
        delay = self.requeue_backoff_base * 2.0 ** min(evictions - 1, 60)
        return min(delay, self.requeue_backoff_max)
