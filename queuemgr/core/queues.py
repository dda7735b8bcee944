"""A ClusterQueue's pending workloads, kept as sorted runs per LocalQueue and gang shape.

Why it exists: a deep queue holds thousands of workloads but only a handful of
shapes (a 1-GPU job, an 8x8 gang...). Workloads of one shape fit or fail
together, so a cycle walks shapes, not workloads: once a shape fails in a
queue, the rest of that run share its verdict without being looked at. The
cost of a cycle then follows the admissions and the shapes, not the backlog.

What must stay true: each run is sorted in queue order (higher priority,
earlier creation, then namespace/name); the merged order of the runs is the
queue order; a run handed to a snapshot is never mutated afterwards (writers
replace runs, they do not edit them).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import overload

from queuemgr.core.model import Workload
from queuemgr.core.shapes import ShapeId

# A run: one LocalQueue's workloads of one shape. Runs are per LocalQueue so that
# an ordering by LocalQueue (fair share by usage) can still walk them in order.
RunKey = tuple[str, str, ShapeId]  # (namespace, LocalQueue, shape)
Runs = Mapping[RunKey, Sequence[Workload]]
Rank = Callable[[Workload], tuple[object, ...]]


def order_key(w: Workload) -> tuple[int, float, str]:
    """Order within a queue: higher priority, earlier creation, then namespace/name."""
    return w.order_key


def run_key(w: Workload) -> RunKey:
    return (w.namespace, w.queue, w.shape)


class PendingQueue(Sequence[Workload]):
    """An immutable view of one queue: its runs by shape, and their merged order."""

    __slots__ = ("_flat", "_len", "runs")

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self._len = sum(len(r) for r in runs.values())
        self._flat: list[Workload] | None = None

    @staticmethod
    def of(workloads: Iterable[Workload]) -> PendingQueue:
        runs: dict[RunKey, list[Workload]] = {}
        for w in workloads:
            runs.setdefault(run_key(w), []).append(w)
        for run in runs.values():
            run.sort(key=order_key)
        return PendingQueue(runs)

    def _merged(self) -> list[Workload]:
        if self._flat is None:
            self._flat = list(heapq.merge(*self.runs.values(), key=order_key))
        return self._flat

    def ranked(self, rank: Rank | None) -> Iterable[Workload]:
        """The queue in the cycle's order: queue order, or ``rank`` when one is given."""
        if rank is None:
            return self._merged()
        return heapq.merge(*self.runs.values(), key=rank)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Workload]:
        return iter(self._merged())

    @overload
    def __getitem__(self, i: int) -> Workload: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Workload]: ...
    def __getitem__(self, i: int | slice) -> Workload | Sequence[Workload]:
        return self._merged()[i]

    def __repr__(self) -> str:
        return f"PendingQueue({len(self)} workloads, {len(self.runs)} runs)"


class Cursor:
    """Walks one queue head by head in the cycle's order, and can drop a whole shape.

    ``rank`` orders workloads (queue order by default); it must agree with the
    order of each run, which holds for any rank that puts a LocalQueue's key first.
    """

    __slots__ = ("_deferred", "_dropped", "_heap", "_pos", "_rank", "_runs")

    def __init__(self, queue: PendingQueue, rank: Rank | None = None) -> None:
        self._runs = queue.runs
        self._rank: Rank = rank or order_key
        self._pos: dict[RunKey, int] = {}
        self._dropped: set[ShapeId] = set()
        self._deferred: set[ShapeId] = set()
        self._heap: list[tuple[tuple[object, ...], RunKey]] = []
        for key, run in queue.runs.items():
            if run:
                self._pos[key] = 0
                self._heap.append((self._rank(run[0]), key))
        heapq.heapify(self._heap)

    def head(self) -> Workload | None:
        heap = self._heap
        while heap and (heap[0][1][2] in self._dropped or heap[0][1][2] in self._deferred):
            heapq.heappop(heap)
        if not heap:
            return None
        key = heap[0][1]
        return self._runs[key][self._pos[key]]

    def advance(self) -> None:
        """Move past the head; the next workload of its run stays in line."""
        _, key = heapq.heappop(self._heap)
        pos = self._pos[key] + 1
        self._pos[key] = pos
        run = self._runs[key]
        if pos < len(run):
            heapq.heappush(self._heap, (self._rank(run[pos]), key))

    def drop_shape(self) -> None:
        """Leave the head's whole shape behind: every one of them shares its verdict."""
        _, key = heapq.heappop(self._heap)
        self._dropped.add(key[2])

    def defer_shape(self) -> None:
        """Set the head's whole shape aside until :meth:`resume` (it must borrow)."""
        _, key = heapq.heappop(self._heap)
        self._deferred.add(key[2])

    def resume(self) -> None:
        """Offer the deferred shapes again, each run from where it stopped."""
        if not self._deferred:
            return
        self._deferred.clear()
        self._heap = [
            (self._rank(self._runs[key][pos]), key)
            for key, pos in self._pos.items()
            if pos < len(self._runs[key]) and key[2] not in self._dropped
        ]
        heapq.heapify(self._heap)

    def clear(self) -> None:
        self._heap.clear()


class QueueBook:
    """The mutable side: the cache's queues, replacing runs copy-on-write."""

    def __init__(self) -> None:
        self._runs: dict[RunKey, tuple[Workload, ...]] = {}
        self._view: PendingQueue | None = None

    def add(self, w: Workload) -> None:
        rk = run_key(w)
        run = self._runs.get(rk, ())
        # Insert in queue order: runs are replaced, never changed (snapshots hold them),
        # and the copy is two slices, done in C.
        at = bisect.bisect_left(run, w.order_key, key=order_key)
        self._runs[rk] = (*run[:at], w, *run[at:])
        self._view = None

    def remove(self, w: Workload) -> None:
        self._view = None
        rk = run_key(w)
        old = self._runs[rk]
        # A run is in queue order and order keys are unique (they end with the id), so
        # the workload is found by bisection and the copy is two slices, done in C.
        at = bisect.bisect_left(old, w.order_key, key=order_key)
        if at < len(old) and old[at] is w:
            run = old[:at] + old[at + 1 :]
        else:  # an equal workload, not this object: fall back to identity
            run = tuple(x for x in old if x is not w)
        if run:
            self._runs[rk] = run
        else:
            del self._runs[rk]

    def __bool__(self) -> bool:
        return bool(self._runs)

    def view(self) -> PendingQueue:
        if self._view is None:
            self._view = PendingQueue(dict(self._runs))
        return self._view
