"""Partial admission: when a gang's full count does not fit, the most pods that do.

Why it exists: an elastic job (a sweep, a data-parallel trainer that can run
on fewer workers) declares ``min_count`` on one pod set. Rather than wait for
room for every pod, it starts now with as many as fit, never fewer than
``min_count`` (Kueue's partial admission).

What must stay true: at most one pod set of a workload is partial (the model
enforces it); the admitted count ``k`` is in ``[min_count, count]`` and is the
largest that fits quota and nodes, found by binary search, since fitting is
monotone in ``k`` (fewer pods need less quota and fewer node slots). The
admission's placements sum to ``k`` for that pod set; usage charges only the
placed pods (``snapshot.admitted_requests``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from queuemgr.core.model import ClusterQueue, FlavorName, PodSet, PodSetPlacement, Workload
from queuemgr.core.placement import NodePool
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.resources import Resources

T = TypeVar("T")


def partial_pod_set(w: Workload) -> PodSet | None:
    """The pod set that may shrink, if any: one with ``min_count`` below its ``count``."""
    return w.partial_pod_set


def with_count(w: Workload, pod_set: str, count: int) -> Workload:
    """``w`` with ``count`` pods in ``pod_set`` and no partial admission left to try.

    Same id, priority and creation time; its shape and total requests are the
    reduced gang's, which is what quota and placement must judge.
    """
    pod_sets = tuple(
        dataclasses.replace(ps, count=count, min_count=None) if ps.name == pod_set else ps
        for ps in w.pod_sets
    )
    return dataclasses.replace(w, pod_sets=pod_sets)


def smallest(w: Workload) -> Workload | None:
    """``w`` at its partial pod set's ``min_count``, or None when nothing may shrink."""
    ps = partial_pod_set(w)
    if ps is None or ps.min_count is None:
        return None
    return with_count(w, ps.name, ps.min_count)


def largest_fit(low: int, high: int, attempt: Callable[[int], T | None]) -> tuple[int, T] | None:
    """The largest ``k`` in ``[low, high]`` whose ``attempt(k)`` is not None, and that result.

    Binary search: assumes that if ``k`` fits, every smaller ``k`` fits too.
    None when even ``low`` does not fit (or the range is empty).
    """
    if low > high:
        return None
    found = attempt(low)
    if found is None:
        return None
    best = (low, found)
    lo, hi = low + 1, high
    while lo <= hi:
        mid = (lo + hi) // 2
        got = attempt(mid)
        if got is None:
            hi = mid - 1
        else:
            best = (mid, got)
            lo = mid + 1
    return best


def largest_partial(
    ledger: QuotaLedger, pool: NodePool, cq: ClusterQueue, w: Workload
) -> tuple[FlavorName, tuple[PodSetPlacement, ...], bool, Resources] | None:
    """The first flavor where a partial admission of ``w`` fits, with the largest count.

    Tried only once the full count fits no flavor: a whole gang on a later flavor
    beats a partial one on an earlier flavor (Kueue's order). Returns the flavor,
    the placements, whether it borrows, and the reduced gang's requests.
    """
    ps = partial_pod_set(w)
    if ps is None or ps.min_count is None:
        return None
    for fq in cq.flavors:

        def attempt(
            k: int, flavor: FlavorName = fq.flavor
        ) -> tuple[tuple[PodSetPlacement, ...], bool, Resources] | None:
            low = with_count(w, ps.name, k)
            check = ledger.check_for(cq, flavor, low)
            if not check.fits:
                return None
            placements = pool.place(flavor, low.pod_sets)
            if placements is None:
                return None
            return (placements, check.borrowing, low.total_requests)

        found = largest_fit(ps.min_count, ps.count - 1, attempt)
        if found is not None:
            return (fq.flavor, *found[1])
    return None
