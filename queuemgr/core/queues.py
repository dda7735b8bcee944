"""A ClusterQueue's pending workloads, kept as one sorted run per gang shape.

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

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import overload

from queuemgr.core.model import ShapeId, Workload

Runs = Mapping[ShapeId, Sequence[Workload]]


def order_key(w: Workload) -> tuple[int, float, str]:
    """Order within a queue: higher priority, earlier creation, then namespace/name."""
    return w.order_key


class PendingQueue(Sequence[Workload]):
    """An immutable view of one queue: its runs by shape, and their merged order."""

    __slots__ = ("_flat", "_len", "runs")

    def __init__(self, runs: Runs) -> None:
        self.runs = runs
        self._len = sum(len(r) for r in runs.values())
        self._flat: list[Workload] | None = None

    @staticmethod
    def of(workloads: Iterable[Workload]) -> PendingQueue:
        runs: dict[ShapeId, list[Workload]] = {}
        for w in workloads:
            runs.setdefault(w.shape, []).append(w)
        for run in runs.values():
            run.sort(key=order_key)
        return PendingQueue(runs)

    def _merged(self) -> list[Workload]:
        if self._flat is None:
            self._flat = list(heapq.merge(*self.runs.values(), key=order_key))
        return self._flat

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
        return f"PendingQueue({len(self)} workloads, {len(self.runs)} shapes)"


class Cursor:
    """Walks one queue head by head in queue order, and can drop a whole shape."""

    __slots__ = ("_heap", "_pos", "_runs")

    def __init__(self, queue: PendingQueue) -> None:
        self._runs = queue.runs
        self._pos: dict[ShapeId, int] = {}
        self._heap: list[tuple[tuple[int, float, str], ShapeId]] = []
        for shape, run in queue.runs.items():
            if run:
                self._pos[shape] = 0
                self._heap.append((run[0].order_key, shape))
        heapq.heapify(self._heap)

    def head(self) -> Workload | None:
        if not self._heap:
            return None
        shape = self._heap[0][1]
        return self._runs[shape][self._pos[shape]]

    def advance(self) -> None:
        """Move past the head; the next workload of its shape stays in line."""
        _, shape = heapq.heappop(self._heap)
        pos = self._pos[shape] + 1
        self._pos[shape] = pos
        run = self._runs[shape]
        if pos < len(run):
            heapq.heappush(self._heap, (run[pos].order_key, shape))

    def drop_shape(self) -> None:
        """Leave the head's whole shape behind: every one of them shares its verdict."""
        heapq.heappop(self._heap)

    def clear(self) -> None:
        self._heap.clear()


class QueueBook:
    """The mutable side: the cache's queues, replacing runs copy-on-write."""

    def __init__(self) -> None:
        self._runs: dict[ShapeId, tuple[Workload, ...]] = {}
        self._view: PendingQueue | None = None

    def add(self, w: Workload) -> None:
        run = list(self._runs.get(w.shape, ()))
        # Insert in queue order; runs are short enough that a copy is cheap.
        key = w.order_key
        lo, hi = 0, len(run)
        while lo < hi:
            mid = (lo + hi) // 2
            if run[mid].order_key < key:
                lo = mid + 1
            else:
                hi = mid
        run.insert(lo, w)
        self._runs[w.shape] = tuple(run)
        self._view = None

    def remove(self, w: Workload) -> None:
        self._view = None
        run = tuple(x for x in self._runs[w.shape] if x is not w)
        if run:
            self._runs[w.shape] = run
        else:
            del self._runs[w.shape]

    def __bool__(self) -> bool:
        return bool(self._runs)

    def view(self) -> PendingQueue:
        if self._view is None:
            self._view = PendingQueue(dict(self._runs))
        return self._view
