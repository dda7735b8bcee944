"""How much the victim search's shortcuts save, on the Philly replay with preemption on.

Why it exists: with preemption on, a busy cycle spent most of its time searching for
victims, and the whole-trace replay did not finish. core/preemption.py now leaves out
early what it would skip anyway and memoises shares per ledger version; this runs the
same jobs through the simulator with that search and with the plain one
(tests/plain_search.py, the specification), alternating, in one process, and prints each
run's wall time, the best and the median per search, their ratio, and whether both
decided the same (a digest of every event, in order).

The cluster and jobs are bench/policy_replay.py's with ``--preemption`` (reclaim ``Any``
and fair sharing, 160 nodes x 8 GPUs, 8 tenants), under the default policy.

    python bench/victim_search.py [--limit 4000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import policy_replay  # noqa: E402

from queuemgr.core import admitter  # noqa: E402
from queuemgr.core.policy import SchedulerPolicy  # noqa: E402
from queuemgr.core.preemption import Preemptor  # noqa: E402
from queuemgr.sim.engine import Engine  # noqa: E402
from queuemgr.sim.trace import load_trace  # noqa: E402
from queuemgr.spec.scenario import SimWorkload, load_scenario  # noqa: E402
from tests.plain_search import PlainPreemptor  # noqa: E402


def jobs(limit: int) -> list[SimWorkload]:
    scenario = load_scenario(policy_replay.SCENARIO)
    namespaces = {ns for (ns, name) in scenario.config.local_queues if name == "default"}
    loaded = load_trace(
        policy_replay.TRACE, namespaces=namespaces, assign_tenants=8, seed=0, max_runtime="none"
    ).workloads[:limit]
    return [
        dataclasses.replace(
            sw,
            workload=dataclasses.replace(
                sw.workload, max_runtime=policy_replay.declared_limit(sw.runtime)
            ),
        )
        for sw in loaded
    ]


def run(search: type[Preemptor], workloads: list[SimWorkload]) -> tuple[float, str, int]:
    """Wall seconds, event digest and preemptions of one replay with ``search``."""
    config = policy_replay.cluster(True, 0.0)
    digest = hashlib.sha256()

    def emit(e: dict[str, object]) -> None:
        digest.update(json.dumps(e, sort_keys=True, default=str).encode())

    admitter.Preemptor = search  # type: ignore[misc]
    try:
        engine = Engine(config, workloads, emit=emit, policy=SchedulerPolicy())
        started = time.perf_counter()
        engine.run()
        took = time.perf_counter() - started
    finally:
        admitter.Preemptor = Preemptor  # type: ignore[misc]
    return took, digest.hexdigest()[:16], engine.tally.preemptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=4000, help="the first N Philly jobs")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each search")
    args = parser.parse_args()
    workloads = jobs(args.limit)
    walls: dict[str, list[float]] = {"pruned": [], "plain": []}
    digests: set[str] = set()
    for i in range(args.rounds):
        for name, search in (("pruned", Preemptor), ("plain", PlainPreemptor)):
            took, digest, preemptions = run(search, workloads)
            walls[name].append(took)
            digests.add(digest)
            print(f"round {i + 1} {name:>6}: {took:8.1f} s, {preemptions} preemptions, {digest}")
    for name, w in walls.items():
        print(f"{name:>6}: best {min(w):.1f} s, median {statistics.median(w):.1f} s")
    best = min(walls["plain"]) / min(walls["pruned"])
    median = statistics.median(walls["plain"]) / statistics.median(walls["pruned"])
    print(f"plain / pruned: {best:.2f}x (best), {median:.2f}x (median)")
    print("same decisions: " + ("yes" if len(digests) == 1 else f"NO ({sorted(digests)})"))


if __name__ == "__main__":
    main()
