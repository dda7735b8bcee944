"""Shares and waits in bench/scenarios/mig-fleet.yaml, with and without resource weights.

Both files run through the simulator (the same ``schedule()`` as ``queuemgr serve``).
At each sample time this prints, per tenant and run, the GPUs and 1g.10gb slices it
holds and two dominant shares of what it borrows, both computed by the core's own
``QuotaLedger`` over what is admitted at that moment:

- ``weighted``: the share with the weights (a slice is 1/7 of a GPU, the cohort lends
  36 GPU-equivalents): compute borrowed, in one unit for every tenant;
- ``DRF``: the share without them (slices and GPUs are two dimensions, the larger
  ratio counts).

Each run orders its borrowers by its own kind of share: the weighted file by the
first, the unweighted one by the second. Then the time-averaged shares (over the
samples) and each job group's wait (admission - submission: mean, nearest-rank p50,
max).

Usage:  python bench/mig_fleet.py [--weighted FILE] [--unweighted FILE] [--every S] [--until S]
"""

from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction
from pathlib import Path

from queuemgr.core.model import ClusterQueueName, FlavorName
from queuemgr.core.quota import QuotaLedger
from queuemgr.core.quota_topology import QuotaTopology
from queuemgr.core.resources import GPU, ResourceName
from queuemgr.sim.engine import Engine
from queuemgr.spec.scenario import load_scenario

SLICE = ResourceName("nvidia.com/mig-1g.10gb")
Usage = dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]]


def _share(topo: QuotaTopology, usage: Usage, cq: ClusterQueueName) -> Fraction:
    infinite, exact = QuotaLedger(topo, usage).share(cq)
    assert not infinite
    return exact


def run(path: Path, weighted: QuotaTopology, plain: QuotaTopology, times: list[float]) -> dict:
    scenario = load_scenario(path)
    events: list[dict[str, object]] = []
    engine = Engine(scenario.config, scenario.workloads, emit=events.append, policy=scenario.policy)
    queues = sorted(scenario.config.cluster_queues)
    samples = []
    for t in times:
        engine.run(until=t)
        usage: Usage = {}
        for a in engine.cache.admitted():
            per = usage.setdefault(a.admission.cluster_queue, {}).setdefault(a.admission.flavor, {})
            for r, v in a.held.items():
                per[r] = per.get(r, 0) + v
        row = {}
        for q in queues:
            held = usage.get(q, {})
            row[q] = (
                sum(v.get(GPU, 0) for v in held.values()),
                sum(v.get(SLICE, 0) for v in held.values()),
                _share(weighted, usage, q),
                _share(plain, usage, q),
            )
        samples.append((t, row))
    result = engine.run()
    submitted: dict[str, float] = {}
    waits: dict[str, list[float]] = {}
    for e in events:
        wid = str(e["workload"])
        if e["event"] == "submitted":
            submitted[wid] = float(e["t"])  # type: ignore[arg-type]
        elif e["event"] == "admitted":
            group = wid.rsplit("-", 1)[0]
            waits.setdefault(group, []).append(float(e["t"]) - submitted[wid])  # type: ignore[arg-type]
    return {
        "queues": queues,
        "samples": samples,
        "waits": waits,
        "evictions": result.evictions,
        "end": result.end_time,
    }


def _p50(xs: list[float]) -> float:
    s = sorted(xs)
    return s[max(0, math.ceil(len(s) / 2) - 1)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weighted", type=Path, default=Path("bench/scenarios/mig-fleet.yaml"))
    p.add_argument(
        "--unweighted", type=Path, default=Path("bench/scenarios/mig-fleet-unweighted.yaml")
    )
    p.add_argument("--every", type=float, default=1800.0, help="seconds between samples")
    p.add_argument("--until", type=float, default=18000.0, help="last sample time")
    args = p.parse_args(argv)
    weighted = load_scenario(args.weighted).config.quota_topology
    plain = load_scenario(args.unweighted).config.quota_topology
    times = [args.every * k for k in range(int(args.until // args.every) + 1)]
    runs = {
        "with weights": run(args.weighted, weighted, plain, times),
        "without": run(args.unweighted, weighted, plain, times),
    }
    queues = runs["with weights"]["queues"]
    print("cells: GPUs held + slices held, weighted share / DRF share (what each borrows)")
    print(f"{'t (s)':>6} {'run':<13}" + "".join(f" {q:>26}" for q in queues))
    for i, t in enumerate(times):
        for name, r in runs.items():
            row = r["samples"][i][1]
            cells = "".join(
                f" {g:>3}+{s:<3}{float(w):>9.3f} / {float(d):<7.3f}"
                for g, s, w, d in (row[q] for q in queues)
            )
            print(f"{t:>6.0f} {name:<13}{cells}")
    print("\ntime-averaged share over the samples (weighted / DRF):")
    for name, r in runs.items():
        n = len(r["samples"])
        avg = {
            q: (
                sum(float(row[q][2]) for _, row in r["samples"]) / n,
                sum(float(row[q][3]) for _, row in r["samples"]) / n,
            )
            for q in queues
        }
        print(f"  {name:<13}" + "  ".join(f"{q} {w:.3f} / {d:.3f}" for q, (w, d) in avg.items()))
    print("\nwaits (s): mean, p50, max per job group")
    for name, r in runs.items():
        print(f"  {name} (evictions {r['evictions']}, last event at {r['end']:.0f} s)")
        for group, w in sorted(r["waits"].items()):
            mean = sum(w) / len(w)
            figures = f"mean={mean:>6.0f} p50={_p50(w):>6.0f} max={max(w):>6.0f}"
            print(f"    {group:<20} n={len(w):>3} {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
