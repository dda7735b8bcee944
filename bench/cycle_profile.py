"""Time the large case's lazy cycle (100,000 pending, 1,000 ClusterQueues, 10,000 nodes)
three times, then print a cProfile of one more: for comparing two trees function by function.

It builds cycle_bench's snapshot, schedules once to warm the per-config memos, freezes the
heap as the service does, and times ``schedule`` in CPU seconds.

    python bench/cycle_profile.py
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cycle_bench import make_snapshot

from queuemgr.core import schedule


def main() -> None:
    snap = make_snapshot(100_000, 1_000, 10_000)
    schedule(snap, 0.0)
    gc.collect()
    gc.freeze()
    times = []
    for _ in range(3):
        start = time.process_time()
        schedule(snap, 0.0)
        times.append(time.process_time() - start)
    print("lazy cycle CPU s:", ", ".join(f"{t:.3f}" for t in times))
    profile = cProfile.Profile()
    profile.enable()
    schedule(snap, 0.0)
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
