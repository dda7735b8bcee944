"""Loans refused: why a workload may use only its ClusterQueue's nominal quota.

Why it exists: ``ClusterQueue.no_loan`` is the one rule for every path that asks
whether a workload may borrow (quota checks, the victim search, reservations,
ETAs), and the judges name its reasons and its threshold in their verdicts and
words (``core.quota``, ``core.admissibility``, ``core.victim_rules``): a small
vocabulary of its own, beside the objects of ``model``.

What must stay true: ``REPEAT_VICTIM`` is one threshold for all its uses (no more
loans, a victim of last resort, no victim of fair sharing); every ``NoLoan`` has a
quota verdict of its own (``core.quota``), so a kept workload says why it waits.
"""

from __future__ import annotations

import enum

# Preempted this often, a workload borrows no more (ClusterQueue.no_loan), becomes a
# victim of last resort (core.preemption), and no victim of fair sharing at all
# (core.victim_rules): a run taken again and again delivers nothing.
REPEAT_VICTIM = 3


class NoLoan(enum.Enum):
    """Why a workload may use only its ClusterQueue's nominal quota."""

    # It declares a max_runtime beyond the queue's borrowing_max_runtime, or none.
    RUNTIME = "runtime"
    # It was preempted REPEAT_VICTIM times, and the queue's nominal quota can hold it.
    REPEAT_VICTIM = "repeat victim"
