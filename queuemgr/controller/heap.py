"""Keeping the collector off the leader's long-lived rows: when to freeze the heap.

Why it exists: at 100,000 pending workloads the leader's mirror holds millions
of objects that live as long as their rows, and every cycle allocates enough
(each pending workload's standing, for the status board) to trigger a full
collection, which walks all of them: 0.5 to 0.7 s, landing in a random phase
of a random cycle. ``gc.freeze()`` moves every object alive now into a
permanent generation that collections skip; what a cycle allocates is still
collected as usual.

A new leader's load of every row is the worst case: the heap grows by millions
of objects, and each automatic full collection on the way walks all of them
again (5.4 s of an 18 s start at 100,000 pending). :meth:`HeapKeeper.pause`
turns automatic collection off for that load; the freeze after the first
cycle collects once and turns it back on.

What must stay true: automatic collection is off only between a ``pause`` and
the next freeze or ``release``, never across a second cycle; frozen objects
are still freed by reference counting, so only garbage in reference cycles
among them would be kept; the heap is unfrozen, collected and frozen again
after a cycle that read many rows, most of those it holds (a new leader's
load, a reload after a failure) and at least every ``REFREEZE_S``, so such
garbage lives at most that long. Freezing changes no decision.
"""

from __future__ import annotations

import gc

REFREEZE_S = 600.0
# A cycle that read at least this many rows, and at least half of the live ones (a
# load or a reload: most of the heap is new), freezes a new heap. A busy stream's
# cycle may read as many new submissions without the heap being new: a full
# collection there cost a second of a 30 s run at 5,000 admissions/s.
MANY_ROWS = 10_000


class HeapKeeper:
    def __init__(self) -> None:
        self._frozen_at: float | None = None

    def after_cycle(self, rows_read: int, now: float, live: int = 0) -> bool:
        """Freeze the heap anew if due (``live``: the rows the leader holds now); whether it did."""
        reloaded = rows_read >= MANY_ROWS and 2 * rows_read >= live
        due = self._frozen_at is None or reloaded or now - self._frozen_at >= REFREEZE_S
        if not due:
            return False
        paused = not gc.isenabled()
        gc.unfreeze()
        if not paused:
            gc.collect()
        # After a pause the heap is mostly the rows just read, which are alive: frozen
        # uncollected, what cyclic garbage the load left waits for the next refreeze.
        gc.freeze()
        gc.enable()
        self._frozen_at = now
        return True

    def pause(self) -> None:
        """Collect nothing until the next freeze: a whole load of rows is coming."""
        gc.disable()
        self._frozen_at = None  # so that the next cycle freezes

    def release(self) -> None:
        """Hand everything back to the collector (the loop stops or loses the lease)."""
        gc.unfreeze()
        gc.enable()
        self._frozen_at = None
