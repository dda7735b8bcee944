"""Admissibility: whether a workload could ever be admitted, and why not.

Why it exists: a workload that no flavor of its ClusterQueue could ever hold
(its quota could never grow that far, or no set of empty nodes holds the gang),
or that cannot reach a ClusterQueue at all, waits as ``Inadmissible`` and must
neither block a StrictFIFO queue nor get a reservation. The cycle (core.cycle)
asks; this module answers from the configuration alone.

What must stay true: the answer depends only on the configuration and the
workload's shape and why it may not borrow, if it may not (``ClusterQueue.no_loan``;
so it is memoised per ClusterQueue, shape and that reason on the configuration); a
partial workload is inadmissible only if its smallest form
is; every message names the flavor and the numbers.
"""

from __future__ import annotations

from queuemgr.core.loans import REPEAT_VICTIM, NoLoan
from queuemgr.core.model import ClusterQueue, Workload
from queuemgr.core.partial import smallest
from queuemgr.core.placement import fits_empty
from queuemgr.core.snapshot import Config
from queuemgr.core.verdicts import PendingReason, Verdict


def inadmissible(config: Config, cq: ClusterQueue, w: Workload) -> Verdict | None:
    """A verdict when no flavor could ever take ``w``, however idle the cluster."""
    memo = config.never_fits
    # Its declared runtime, or how often it was preempted, decides if it may borrow.
    key: tuple[object, ...] = (cq.name, w.shape, cq.no_loan(w))
    if key not in memo:
        # A partial workload can never fit only if its smallest form cannot.
        memo[key] = _never_fits(config, cq, smallest(w) or w)
    return memo[key]


def _kept_in(cq: ClusterQueue, kept: NoLoan) -> str:
    """Why a workload may use only its nominal quota, in words."""
    if kept is NoLoan.REPEAT_VICTIM:
        return f"preempted {REPEAT_VICTIM} times, it borrows no more"
    return (
        "it may borrow only if it declares a max_runtime of at most "
        f"{cq.borrowing_max_runtime or 0:g} s"
    )


def _never_fits(config: Config, cq: ClusterQueue, w: Workload) -> Verdict | None:
    topo = config.quota_topology
    nodes = config.node_topology
    why: list[str] = []
    kept = cq.no_loan(w)
    for fq in cq.flavors:
        over = [
            (r, v, most)
            for r, v in sorted(w.total_requests.items())
            if v > (most := topo.max_usage(cq.name, fq.flavor, r, borrows=kept is None))
        ]
        if over:
            r, v, most = over[0]
            why.append(
                f"{fq.flavor}: needs {v} {r}, quota allows at most {most}"
                + ("" if kept is None else f" (its nominal quota: {_kept_in(cq, kept)})")
            )
        elif not fits_empty(
            nodes, fq.flavor, w.shape, w.pod_sets, virtual=bool(cq.admission_checks)
        ):
            why.append(f"{fq.flavor}: no set of empty nodes can hold the gang")
        else:
            return None
    if not why:
        why.append(f"ClusterQueue {cq.name!r} has no flavors")
    return Verdict(reason=PendingReason.INADMISSIBLE, detail="; ".join(why))


def unroutable_verdict(config: Config, w: Workload) -> Verdict:
    """Why a workload reaches no ClusterQueue: its LocalQueue, or the namespace rule."""
    lq = config.local_queues.get((w.namespace, w.queue))
    if lq is None:
        message = f"LocalQueue {w.namespace}/{w.queue} does not exist"
    elif lq.cluster_queue not in config.cluster_queues:
        message = (
            f"ClusterQueue {lq.cluster_queue!r} of LocalQueue {w.namespace}/{w.queue} "
            "does not exist"
        )
    else:
        message = f"namespace {w.namespace!r} may not use ClusterQueue {lq.cluster_queue!r}"
    return Verdict(reason=PendingReason.INADMISSIBLE, detail=message)
