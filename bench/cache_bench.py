"""The leader's cache: the cost of one admission or finish folded in, with snapshots between.

    python bench/cache_bench.py [--nodes N] [--queues Q] [--every K] [--repeat R]

Why it exists: the service's mirror folds every admission and finish into a
``core.cache.Cache`` (its free capacity per node and the index of nodes by
free capacity that placement reads) and takes one snapshot per cycle. At
thousands of admissions a second this bookkeeping is a share of the loop in
its own right. This times it alone: the cycle benchmark's half-full cluster
(``cycle_bench.make_snapshot``), each of its running workloads added and
then removed three times over, with a snapshot every ``--every`` events (a
cycle's worth). It prints microseconds per event, best and median of
``--repeat`` runs. What it leaves out: the store, the pending queues, and the
scheduling cycle itself.
"""

from __future__ import annotations

import argparse
import statistics
import time

from cycle_bench import make_snapshot

from queuemgr.core.cache import Cache
from queuemgr.core.model import AdmittedWorkload
from queuemgr.core.snapshot import Config


def one_run(config: Config, admitted: list[AdmittedWorkload], every: int) -> float:
    """Microseconds per event (an add or a remove) over one run."""
    cache = Cache(config)
    started = time.perf_counter()
    for _ in range(3):
        for i, a in enumerate(admitted):
            cache.add_admitted(a)
            if i % every == every - 1:
                cache.snapshot()
        for i, a in enumerate(admitted):
            cache.remove_admitted(a.workload.id)
            if i % every == every - 1:
                cache.snapshot()
    return (time.perf_counter() - started) / (6 * len(admitted)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="8-GPU nodes (1000)")
    parser.add_argument("--queues", type=int, default=100, help="ClusterQueues (100)")
    parser.add_argument("--every", type=int, default=300, help="events per snapshot (300)")
    parser.add_argument("--repeat", type=int, default=7, help="runs (7)")
    args = parser.parse_args()
    for name, most in (("nodes", 100_000), ("queues", 10_000), ("every", 10**6), ("repeat", 100)):
        value = getattr(args, name)
        if not 1 <= value <= most:
            parser.error(f"--{name}: expected 1 to {most}, got {value}")
    snap = make_snapshot(pending=0, queues=args.queues, nodes=args.nodes)
    admitted = list(snap.admitted.values())
    runs = [one_run(snap.config, admitted, args.every) for _ in range(args.repeat)]
    print(
        f"{args.nodes} nodes, {len(admitted)} running workloads, a snapshot every "
        f"{args.every} events: {min(runs):.2f} us per event best, "
        f"{statistics.median(runs):.2f} us median ({args.repeat} runs)"
    )


if __name__ == "__main__":
    main()
