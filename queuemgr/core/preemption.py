"""Preemption: which admitted gangs to evict so that a pending one can start.

Why it exists: a queue is always entitled to its nominal quota, and a high
priority job should not wait behind a low priority one of its own queue. The
ClusterQueue's ``preemption`` fields say who may evict whom (Kueue's rules):

- ``within_cluster_queue``: ``LowerPriority`` evicts lower priorities of the
  same queue; ``LowerOrNewerEqualPriority`` also equal priorities admitted
  from newer workloads;
- ``reclaim_within_cohort``: a queue that needs quota within its own nominal
  may evict workloads of cohort peers that are borrowing (``LowerPriority``:
  only lower priorities; ``Any``: any priority).

What must stay true: victims are tried in order (queues that borrow first,
then lowest priority, then workloads preempted fewer than ``REPEAT_VICTIM``
times, then runs admitted on borrowed quota, then the least work lost: GPU-seconds
run so far, then the most recently admitted) and the set is pruned to a minimal
one; a gang is evicted whole; a run younger than its ClusterQueue's ``min_runtime`` is no victim of
reclaim or fair sharing; fair sharing takes only runs admitted on borrowed quota
since its preemptor started waiting, and never a workload preempted
``REPEAT_VICTIM`` times; nothing is evicted unless the preemptor then fits both
its quota and a node placement; a peer is reclaimed from only while it still
borrows; workloads admitted in this cycle are never victims.

The search runs for most pending heads of a busy cycle and nearly always fails,
so it leaves out early what it would skip anyway: taking victims only lowers
their queues' usage, so a peer that does not borrow, or whose share is already
below the preemptor's, stays so for the whole search. Before it touches a node, it
makes its choices on the quota ledger alone (``_hopeless``): if the preemptor fits
neither the quota nor an upper bound on the nodes' room once every victim it would take
is gone, no step of the search can succeed. Such pruning must never
change which victims are chosen, only how fast (tests/unit/core/test_preemption_search.py
holds it to the plain search).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Mapping
from dataclasses import dataclass
from fractions import Fraction

from queuemgr.core.model import (
    AdmittedWorkload,
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    FlavorName,
    NodeName,
    PodSet,
    PodSetPlacement,
    ReclaimWithinCohort,
    WithinClusterQueue,
    Workload,
    WorkloadId,
)
from queuemgr.core.placement import NodePool
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.reasons import Eviction, PreemptionReason
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.core.victim_rules import (
    REPEAT_VICTIM,
    fair_victim,
    loan_rank,
    preempts_within,
)

_Held = tuple[tuple[ResourceName, int], ...]
_Share = tuple[int, Fraction]
# A queue's path share (QuotaLedger.path_share): its cohorts' shares below the root, then its own.
_Path = tuple[_Share, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Preemption:
    """A way in for ``w``: evict ``victims``, then place it on ``flavor``."""

    flavor: FlavorName
    placements: tuple[PodSetPlacement, ...]
    borrowing: bool
    evictions: tuple[Eviction, ...]


class Preemptor:
    """Finds and applies evictions on a cycle's quota and node overlays."""

    def __init__(
        self,
        *,
        admitted: Mapping[WorkloadId, AdmittedWorkload],
        cluster_queues: Mapping[ClusterQueueName, ClusterQueue],
        ledger: QuotaLedger,
        pool: NodePool,
        fair_cohorts: Collection[CohortName] = (),
        now: float = 0.0,
    ) -> None:
        self._now = now
        self._fair = frozenset(fair_cohorts)
        self._admitted = admitted
        self._cqs = cluster_queues
        self._ledger = ledger
        self._pool = pool
        self.evicted: set[WorkloadId] = set()
        # A busy cycle asks the same questions of hundreds of candidates: whether their
        # queue borrows, whether taking a run of that size is fair. The answers depend on
        # the ledger alone, so they hold until its version moves (see _memo).
        self._memo_version = -1
        self._borrows_memo: dict[tuple[ClusterQueueName, FlavorName], bool] = {}
        self._fair_memo: dict[tuple[ClusterQueueName, FlavorName, _Held], bool] = {}
        self._fair_mine: tuple[ClusterQueueName, _Path] | None = None  # _fair_memo compares with
        self._size: dict[WorkloadId, _Held] = {}
        self._share_memo: dict[ClusterQueueName, _Path] = {}
        self._topology = ledger.topology
        self._by_flavor: (
            dict[FlavorName, dict[ClusterQueueName, dict[_Held, list[AdmittedWorkload]]]] | None
        ) = None

    def find(self, cq: ClusterQueue, w: Workload, *, loans_only: bool = False) -> Preemption | None:
        """Evict a minimal set so that ``w`` fits, or change nothing and return None.

        With ``loans_only``, a peer's run is a victim only if it was admitted on borrowed
        quota: a search that passes over the best victims for another reason (around a
        reservation) must not fall back on runs of days admitted within nominal quota.
        """
        for fq in cq.flavors:
            found = self._try_flavor(cq, w, fq.flavor, loans_only)
            if found is not None:
                return found
        return None

    def hopeless(self, cq: ClusterQueue, w: Workload) -> bool:
        """Whether no search for ``w`` can succeed now, on any flavor.

        A search with ``loans_only``, or on a pool with less room, has fewer victims and
        less room, so it fails too: the caller skips every search it would make.
        """
        for fq in cq.flavors:
            candidates = self._candidates(cq, w, fq.flavor)
            if candidates and not self._hopeless(cq, w, fq.flavor, candidates):
                return False
        return True

    def undo(self, found: Preemption) -> None:
        """Give back the victims of ``found``: it will not go ahead after all."""
        for e in found.evictions:
            self._restore(e.victim)
            self.evicted.discard(e.victim.workload.id)

    # -- the search -------------------------------------------------------
    def _candidates(
        self, cq: ClusterQueue, w: Workload, flavor: FlavorName
    ) -> list[tuple[AdmittedWorkload, PreemptionReason]]:
        within = cq.preemption.within_cluster_queue
        reclaim = cq.preemption.reclaim_within_cohort
        topo = self._topology
        root = topo.root_of.get(cq.name)
        may_reclaim = (
            reclaim is not ReclaimWithinCohort.NEVER
            and root is not None
            and self.within_nominal(cq, w, flavor)
        )
        # Beyond its nominal quota, a queue of a fair-sharing cohort may still take
        # from other borrowers whose share stays at least its own (checked per victim),
        # within the subtree of its highest fair-sharing cohort.
        scope = topo.fair_scope.get(cq.cohort) if cq.cohort is not None else None
        fair = (
            not may_reclaim
            and scope is not None
            and cq.cohort in self._fair
            and not self.within_nominal(cq, w, flavor)
        )
        out: list[tuple[AdmittedWorkload, PreemptionReason]] = []
        groups = self._groups(flavor)
        mine_runs = groups.get(cq.name, {}) if within is not WithinClusterQueue.NEVER else {}
        for a in (a for sizes in mine_runs.values() for a in sizes):
            if a.workload.id not in self.evicted and preempts_within(within, a.workload, w):
                out.append((a, PreemptionReason.IN_CLUSTER_QUEUE))
        if not (may_reclaim or fair):
            return self._ordered(out, flavor, cq.name)
        # Removing victims only lowers their queues' usage: a peer that does not borrow
        # now, or a run whose taking is unfair now, stays so for the rest of this search,
        # so they are left out here rather than skipped one by one in _try_flavor. The
        # preemptor's share is the one _try_flavor uses only if no victim of its own queue
        # can go before the first fair one.
        mine = (
            self._ledger.path_share(cq.name, (flavor, w.total_requests))
            if fair and not out
            else None
        )
        for peer_name, sizes in groups.items():
            peer = self._cqs.get(peer_name)
            if peer_name == cq.name or peer is None or topo.root_of.get(peer_name) != root:
                continue
            if fair and (peer.cohort is None or scope not in topo.tree.chain[peer.cohort]):
                continue  # outside the subtree that shares fairly
            if not self._borrows(peer_name, flavor):
                continue
            if mine is not None and self._below(peer_name, cq.name, self._share(peer_name), mine):
                continue  # even before losing a run its share is below the preemptor's
            young = peer.preemption.min_runtime
            for held, runs in sizes.items():
                if mine is not None and not self._fair_held(peer_name, flavor, held, cq.name, mine):
                    continue
                for a in runs:
                    if a.workload.id in self.evicted:
                        continue
                    if young > 0 and self._now - a.admitted_at < young:
                        continue  # its queue protects a run this young from its cohort
                    if fair:
                        if fair_victim(a, w):
                            out.append((a, PreemptionReason.IN_COHORT_FAIR_SHARING))
                    elif reclaim is ReclaimWithinCohort.ANY or a.workload.priority < w.priority:
                        out.append((a, PreemptionReason.IN_COHORT_RECLAMATION))
        return self._ordered(out, flavor, cq.name)

    def _groups(
        self, flavor: FlavorName
    ) -> Mapping[ClusterQueueName, Mapping[_Held, list[AdmittedWorkload]]]:
        """This cycle's admitted workloads on ``flavor``, per queue and per size."""
        if self._by_flavor is None:
            self._by_flavor = {}
            for a in self._admitted.values():
                per_cq = self._by_flavor.setdefault(a.admission.flavor, {})
                sizes = per_cq.setdefault(a.admission.cluster_queue, {})
                size = self._size[a.workload.id] = tuple(sorted(a.held.items()))
                sizes.setdefault(size, []).append(a)
        return self._by_flavor.get(flavor, {})

    def _ordered(
        self,
        out: list[tuple[AdmittedWorkload, PreemptionReason]],
        flavor: FlavorName,
        preemptor: ClusterQueueName,
    ) -> list[tuple[AdmittedWorkload, PreemptionReason]]:
        # The run that loses the least work goes first (its GPU-seconds so far, then the
        # newest), except a workload already preempted REPEAT_VICTIM times: a run just
        # re-admitted loses the least, and taking it first every time is how one workload
        # gets preempted over and over. Between those, a peer's loans go before its runs
        # admitted within nominal quota: the loans alone cover all it borrows (see
        # _loan_rank), so a run it is due is taken only when the preemptor's placement
        # needs that run's node, and then the one that has done the least work.
        # Within the tree, the nearest borrower goes first: the loan reclaimed from the
        # queue's own cohort before one from a cousin under a higher ancestor.
        now = self._now
        topo = self._topology
        depth = len(topo.below_root.get(preemptor, ()))

        def order(
            item: tuple[AdmittedWorkload, PreemptionReason],
        ) -> tuple[int, int, int, int, int, float, float, str]:
            a, reason = item
            peer = a.admission.cluster_queue
            borrows = self._borrows(peer, flavor)
            return (
                0 if borrows else 1,
                depth - topo.common_depth(preemptor, peer) if peer != preemptor else 0,
                a.workload.priority,
                a.workload.evictions >= REPEAT_VICTIM,
                loan_rank(a, reason),
                a.held.get(GPU, 0) * (now - a.admitted_at),
                -a.admitted_at,
                a.workload.id,
            )

        out.sort(key=order)
        return out

    def _takes(
        self,
        cq: ClusterQueue,
        w: Workload,
        flavor: FlavorName,
        candidates: list[tuple[AdmittedWorkload, PreemptionReason]],
    ) -> Generator[tuple[AdmittedWorkload, PreemptionReason], None, None]:
        """The candidates the search takes, in order; the caller removes each one from
        the ledger before asking for the next, since whether a peer still borrows and
        whether taking from it is fair depend on what was taken before."""
        mine: _Path | None = None  # the preemptor's path share once admitted
        # Taking victims only lowers usage, so a peer that stopped borrowing, or a size
        # that became unfair to take from a peer, stays so for the rest of this search.
        done: set[ClusterQueueName] = set()
        unfair: set[tuple[ClusterQueueName, _Held]] = set()
        for a, reason in candidates:
            if reason is not PreemptionReason.IN_CLUSTER_QUEUE:
                peer = a.admission.cluster_queue
                if peer in done:
                    continue
                if not self._borrows(peer, flavor):
                    done.add(peer)  # back within its nominal: nothing left to reclaim
                    continue
                if reason is PreemptionReason.IN_COHORT_FAIR_SHARING:
                    if mine is None:
                        mine = self._ledger.path_share(cq.name, (flavor, w.total_requests))
                    size = (peer, self._size[a.workload.id])
                    if size in unfair:
                        continue
                    if not self._fair_held(peer, flavor, size[1], cq.name, mine):
                        unfair.add(size)
                        continue
            yield a, reason

    def _hopeless(
        self,
        cq: ClusterQueue,
        w: Workload,
        flavor: FlavorName,
        candidates: list[tuple[AdmittedWorkload, PreemptionReason]],
    ) -> bool:
        """Whether ``w`` cannot fit even once every victim the search would take is gone.

        The search stops at the first victim after which ``w`` fits; when none does, it
        has taken exactly what ``_takes`` gives. That choice depends on the ledger alone,
        so it is made here without touching the nodes. Quota only grows as victims go,
        and ``room_at_most`` bounds what any subset of them frees, so a failure here is
        a failure of every step of the search: most searches of a busy cycle end here,
        before any node is released or any placement tried.
        """
        taken: list[AdmittedWorkload] = []
        ledger = self._ledger
        try:
            for a, _ in self._takes(cq, w, flavor, candidates):
                self._apply(a, -1, _ledger_only)
                taken.append(a)
            if not ledger.check_for(cq, flavor, w).fits:
                return True
        finally:
            for a in taken:
                self._apply(a, 1, _ledger_only)
        released: dict[NodeName, dict[ResourceName, int]] = {}
        for a in taken:
            per_pod = {ps.name: ps.node_requests for ps in a.workload.pod_sets}
            for pl in a.admission.placements:
                vec = released.setdefault(pl.node, {})
                for r, v in per_pod[pl.pod_set].items():
                    vec[r] = vec.get(r, 0) + v * pl.count
        return any(
            self._pool.room_at_most(flavor, ps, released, ps.count) < ps.count for ps in w.pod_sets
        )

    def _try_flavor(
        self, cq: ClusterQueue, w: Workload, flavor: FlavorName, loans_only: bool = False
    ) -> Preemption | None:
        candidates = self._candidates(cq, w, flavor)
        if loans_only:
            candidates = [
                (a, r)
                for a, r in candidates
                if r is PreemptionReason.IN_CLUSTER_QUEUE or a.admission.borrowing
            ]
        if not candidates or self._hopeless(cq, w, flavor, candidates):
            return None
        chosen: list[tuple[AdmittedWorkload, PreemptionReason]] = []
        takes = self._takes(cq, w, flavor, candidates)
        for a, reason in takes:
            self._remove(a)
            chosen.append((a, reason))
            if self._fits(cq, w, flavor):
                takes.close()
                break
        else:
            for a, _ in chosen:
                self._restore(a)
            return None
        # Prune: give back every victim the preemptor can do without.
        for item in reversed(chosen[:-1]):
            self._restore(item[0])
            if self._fits(cq, w, flavor):
                chosen.remove(item)
            else:
                self._remove(item[0])
        check = self._ledger.check_for(cq, flavor, w)
        placements = self._pool.place(flavor, w.pod_sets)
        assert check.fits and placements is not None
        for a, _ in chosen:
            self.evicted.add(a.workload.id)
        return Preemption(
            flavor=flavor,
            placements=placements,
            borrowing=check.borrowing,
            evictions=tuple(
                Eviction(victim=a, preemptor=w.id, preemptor_cluster_queue=cq.name, reason=r)
                for a, r in chosen
            ),
        )

    # -- helpers ----------------------------------------------------------
    def _share(self, cq_name: ClusterQueueName) -> _Path:
        self._memo()
        hit = self._share_memo.get(cq_name)
        if hit is None:
            hit = self._share_memo[cq_name] = self._ledger.path_share(cq_name)
        return hit

    def _below(
        self, peer: ClusterQueueName, preemptor: ClusterQueueName, theirs: _Path, mine: _Path
    ) -> bool:
        """Whether ``theirs`` is below ``mine``, compared at the two queues' lowest common
        ancestor: the shares of its children on each side first, then deeper levels."""
        at = self._topology.common_depth(peer, preemptor)
        return theirs[at:] < mine[at:]

    def _fair_held(
        self,
        cq_name: ClusterQueueName,
        flavor: FlavorName,
        held: _Held,
        preemptor: ClusterQueueName,
        mine: _Path,
    ) -> bool:
        """Kueue's LessThanOrEqualToFinalShare: ``cq_name``, once it loses a run that
        holds ``held``, keeps a share at least ``mine`` (the preemptor's after its
        admission), compared at their lowest common ancestor, so that the victim could
        never take the capacity straight back.
        """
        self._memo()
        if (preemptor, mine) != self._fair_mine:
            self._fair_mine = (preemptor, mine)
            self._fair_memo.clear()
        key = (cq_name, flavor, held)
        hit = self._fair_memo.get(key)
        if hit is None:
            theirs = self._ledger.path_share(cq_name, (flavor, {r: -v for r, v in held}))
            hit = self._fair_memo[key] = not self._below(cq_name, preemptor, theirs, mine)
        return hit

    def _memo(self) -> None:
        if self._memo_version != self._ledger.version:
            self._memo_version = self._ledger.version
            self._borrows_memo.clear()
            self._fair_memo.clear()
            self._share_memo.clear()

    def _fits(self, cq: ClusterQueue, w: Workload, flavor: FlavorName) -> bool:
        if not self._ledger.check_for(cq, flavor, w).fits:
            return False
        return self._pool.place(flavor, w.pod_sets) is not None

    def within_nominal(self, cq: ClusterQueue, w: Workload, flavor: FlavorName) -> bool:
        quota = cq.quota(flavor)
        if quota is None:
            return False
        used = self._ledger.usage(cq.name, flavor)
        return all(
            used.get(r, 0) + v <= quota.nominal.get(r, 0) for r, v in w.total_requests.items()
        )

    def _borrows(self, cq_name: ClusterQueueName, flavor: FlavorName) -> bool:
        self._memo()
        hit = self._borrows_memo.get((cq_name, flavor))
        if hit is None:
            cq = self._cqs.get(cq_name)
            quota = cq.quota(flavor) if cq is not None else None
            used = self._ledger.usage(cq_name, flavor) if quota is not None else {}
            hit = quota is not None and any(v > quota.nominal.get(r, 0) for r, v in used.items())
            self._borrows_memo[(cq_name, flavor)] = hit
        return hit

    def _remove(self, a: AdmittedWorkload) -> None:
        self._apply(a, -1, self._pool.release)

    def _restore(self, a: AdmittedWorkload) -> None:
        self._apply(a, 1, self._pool.take)

    def _apply(
        self,
        a: AdmittedWorkload,
        sign: int,
        nodes: Callable[[tuple[PodSetPlacement, ...], tuple[PodSet, ...]], None],
    ) -> None:
        held = a.held
        self._ledger.add(
            a.admission.cluster_queue, a.admission.flavor, {r: sign * v for r, v in held.items()}
        )
        nodes(a.admission.placements, a.workload.pod_sets)


def _ledger_only(_placements: tuple[PodSetPlacement, ...], _pod_sets: tuple[PodSet, ...]) -> None:
    """``Preemptor._apply``'s node step, left out: the nodes stay as they are."""
