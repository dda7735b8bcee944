"""Replay Kueue's own scheduler benchmark and compare with Kueue's published figures.

Why it exists: Kueue's ``test/performance/scheduler/configs/baseline`` is the
yardstick its users know. ``bench/scenarios/kueue-baseline.yaml`` rebuilds it
(5 cohorts x 6 ClusterQueues, 15,000 workloads in three classes); this script
runs it through ``queuemgr simulate`` and prints our simulated makespan and
mean time to admission per class beside Kueue's, plus how long the simulation
itself took (target: at most 10 s).

Caveat printed with the table: Kueue's figures are wall-clock on a real
apiserver, where admission throughput is the bottleneck; ours are virtual
time with instantaneous cycles, so they show the policy, not API latency.

    python bench/kueue_baseline.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "bench" / "scenarios" / "kueue-baseline.yaml"
KUEUE = {"makespan_s": 351.0, "small": 215.0, "medium": 77.0, "large": 16.5}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        events = Path(tmp) / "events.jsonl"
        summary = Path(tmp) / "summary.json"
        cmd = [sys.executable, "-m", "queuemgr", "simulate", str(SCENARIO),
               "--events", str(events), "--summary", str(summary)]
        subprocess.run(cmd, check=True)
        result = json.loads(summary.read_text())
        submitted: dict[str, float] = {}
        waits: dict[str, list[float]] = defaultdict(list)
        with events.open() as fh:
            for line in fh:
                ev = json.loads(line)
                if ev["event"] == "submitted":
                    submitted[ev["workload"]] = ev["t"]
                elif ev["event"] == "admitted":
                    cls = ev["workload"].split("/", 1)[1].split("-", 1)[0]
                    waits[cls].append(ev["t"] - submitted[ev["workload"]])
    print(f"{'metric':<34}{'queuemgr (simulated)':>22}{'Kueue baseline':>16}")
    makespan = result["makespan_s"]
    print(f"{'makespan / wall time (s)':<34}{makespan:>22.1f}{KUEUE['makespan_s']:>16.1f}")
    for cls in ("small", "medium", "large"):
        mean = sum(waits[cls]) / len(waits[cls])
        print(f"{'mean time to admission, ' + cls + ' (s)':<34}{mean:>22.1f}{KUEUE[cls]:>16.1f}")
    print(f"{'workloads admitted':<34}{result['admitted']:>22}{15000:>16}")
    print(f"{'invariant violations':<34}{result['invariant_violations']:>22}{'-':>16}")
    print(f"{'simulation wall time (s)':<34}{result['wall_time_s']:>22.2f}{'target <= 10':>16}")
    print("Kueue's figures are wall-clock on a real apiserver; ours are virtual time.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
