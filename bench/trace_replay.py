"""Replay the whole shared Philly trace and print the simulator's own cost.

Why it exists: the issue's target for ``queuemgr simulate`` is the full
Philly trace (111,549 jobs) on 256 nodes x 8 GPUs with 8 assigned tenants in
one cohort in at most 120 s and 1 GiB. The run happens in a child process so
that its peak memory is its own.

    python bench/trace_replay.py [--trace PATH] [--limit N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "docs" / "examples" / "philly-256x8.yaml"
TRACE = ROOT.parent / "shared" / "traces" / "philly.csv.gz"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--limit", type=int, default=0, help="replay only the first N jobs")
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace
        if args.limit:
            trace = Path(tmp) / "trace.csv"
            with gzip.open(args.trace, "rt") as src, trace.open("w") as dst:
                for i, line in enumerate(src):
                    if i > args.limit:
                        break
                    dst.write(line)
        summary = Path(tmp) / "summary.json"
        cmd = [sys.executable, "-m", "queuemgr", "simulate", str(SCENARIO), "--trace",
               str(trace), "--assign-tenants", "8", "--seed", "0", "--summary", str(summary)]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        elapsed = time.perf_counter() - t0
        result = json.loads(summary.read_text())
    print(f"jobs                     {result['workloads']}")
    print(f"finished                 {result['finished']}")
    print(f"cycles                   {result['cycles']}")
    print(f"invariant violations     {result['invariant_violations']}")
    print(f"gpu utilization          {result['gpu_utilization']:.3f}")
    print(f"simulation wall time (s) {result['wall_time_s']:.1f}   (target <= 120)")
    print(f"process wall time (s)    {elapsed:.1f}   (start-up and trace loading included)")
    print(f"peak memory (MiB)        {result['peak_memory_mib']:.0f}   (target <= 1024)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
