"""The scheduling cycle on a 3-level cohort tree against the same queues in flat cohorts.

Why it exists: hierarchical cohorts must not make the cycle much dearer (the goal: a
3-level tree of 1,000 ClusterQueues within 1.5x the flat case). The queues, nodes and
workloads are cycle_bench.py's; only the cohorts differ:

- flat: the ClusterQueues in cohorts of 10, each cohort a root (cycle_bench.py's case);
- one cohort: every ClusterQueue in one flat cohort, the tree's single pool without
  its levels;
- tree: the same cohorts of 10 as groups, under 10 divisions of 10 groups, under one
  root ``org``: every queue borrows, and is compared, across the whole tree.

Each case is timed alternately, flat then tree, several times, in one process, as CPU
seconds of one cycle whose every pending status is then built (cycle_bench.py's main
figure) and of the lazy cycle; the ratio tree / flat is the figure.

    python bench/tree_bench.py                      # 10,000 pending, 1,000 CQs, 1,000 nodes
    python bench/tree_bench.py --pending 100000 --nodes 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import sys
from pathlib import Path

from queuemgr.core import Config, Snapshot
from queuemgr.core.model import Cohort, CohortName

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cycle_bench import make_snapshot, time_cycle, time_statuses


def as_tree(snap: Snapshot) -> Snapshot:
    """``snap`` with its cohorts of 10 placed under divisions and one root."""
    config = snap.config
    groups = sorted({cq.cohort for cq in config.cluster_queues.values() if cq.cohort})
    cohorts = [Cohort(name=CohortName("org"))]
    divisions = sorted({CohortName(f"div-{int(g.split('-')[1]) // 10}") for g in groups})
    cohorts += [Cohort(name=d, parent=CohortName("org")) for d in divisions]
    cohorts += [
        Cohort(name=g, parent=CohortName(f"div-{int(g.split('-')[1]) // 10}")) for g in groups
    ]
    tree = Config.of(
        flavors=config.flavors.values(),
        cohorts=cohorts,
        cluster_queues=config.cluster_queues.values(),
        local_queues=config.local_queues.values(),
        nodes=config.nodes.values(),
    )
    return dataclasses.replace(snap, config=tree)


def as_one_cohort(snap: Snapshot) -> Snapshot:
    """``snap`` with every ClusterQueue in one flat cohort: the tree's single pool, flat."""
    config = snap.config
    cqs = [
        dataclasses.replace(cq, cohort=CohortName("org")) for cq in config.cluster_queues.values()
    ]
    one = Config.of(
        flavors=config.flavors.values(),
        cluster_queues=cqs,
        local_queues=config.local_queues.values(),
        nodes=config.nodes.values(),
    )
    return dataclasses.replace(snap, config=one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=1_000)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=5, help="alternating rounds")
    parser.add_argument("--runtimes", action="store_true")
    args = parser.parse_args()
    flat = make_snapshot(args.pending, args.queues, args.nodes, runtimes=args.runtimes)
    tree = as_tree(flat)
    one = as_one_cohort(flat)
    depth = max(tree.config.quota_topology.tree.depth(c) for c in tree.config.cohorts)
    gc.collect()
    gc.freeze()
    cases = (("flat", flat), ("one cohort", one), ("tree", tree))
    figures: dict[str, dict[str, list[float]]] = {
        label: {"statuses": [], "lazy": []} for label, _ in cases
    }
    admitted: dict[str, int] = {}
    for _ in range(args.repeat):
        for label, snap in cases:
            _best, _median, cpu, admitted[label] = time_cycle(snap, 1)
            full, _full_median, _eta = time_statuses(snap, 1)
            figures[label]["lazy"].append(cpu)
            figures[label]["statuses"].append(full)
    print(
        f"{args.pending} pending, {args.queues} ClusterQueues, {args.nodes} nodes; tree of "
        f"{depth + 1} cohort levels; {args.repeat} alternating rounds; CPU ms of one cycle"
    )
    print(
        f"{'':<12}{'statuses best':>15}{'median':>9}{'lazy best':>11}{'median':>9}{'admitted':>10}"
    )
    for label, _ in cases:
        f = figures[label]
        print(
            f"{label:<12}{min(f['statuses']) * 1000:>15.1f}"
            f"{statistics.median(f['statuses']) * 1000:>9.1f}"
            f"{min(f['lazy']) * 1000:>11.1f}{statistics.median(f['lazy']) * 1000:>9.1f}"
            f"{admitted[label]:>10}"
        )
    for base in ("flat", "one cohort"):
        for kind in ("statuses", "lazy"):
            best = min(figures["tree"][kind]) / min(figures[base][kind])
            median = statistics.median(figures["tree"][kind]) / statistics.median(
                figures[base][kind]
            )
            print(f"tree / {base}, {kind}: {best:.2f}x best, {median:.2f}x median")


if __name__ == "__main__":
    main()
