"""Keeping the collector off the leader's long-lived rows: when to freeze the heap.

Why it exists: at 100,000 pending workloads the leader's mirror holds millions
of objects that live as long as their rows, and every cycle allocates enough
(each pending workload's standing, for the status board) to trigger a full
collection, which walks all of them: 0.5 to 0.7 s, landing in a random phase
of a random cycle. ``gc.freeze()`` moves every object alive now into a
permanent generation that collections skip; what a cycle allocates is still
collected as usual.

What must stay true: frozen objects are still freed by reference counting, so
only garbage in reference cycles among them would be kept; the heap is
unfrozen, collected and frozen again after a cycle that read many rows (a new
leader's load, a reload after a failure) and at least every ``REFREEZE_S``,
so such garbage lives at most that long. Freezing changes no decision.
"""

from __future__ import annotations

import gc

REFREEZE_S = 600.0
MANY_ROWS = 10_000  # a cycle that read at least this many rows froze a new heap


class HeapKeeper:
    def __init__(self) -> None:
        self._frozen_at: float | None = None

    def after_cycle(self, rows_read: int, now: float) -> bool:
        """Freeze the heap anew if due; whether it did."""
        due = (
            self._frozen_at is None
            or rows_read >= MANY_ROWS
            or now - self._frozen_at >= REFREEZE_S
        )
        if not due:
            return False
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._frozen_at = now
        return True

    def release(self) -> None:
        """Hand everything back to the collector (the loop stops or loses the lease)."""
        gc.unfreeze()
        self._frozen_at = None
