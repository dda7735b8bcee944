"""Run ``queuemgr demo --plain --speed X --seed S`` for many seeds and tabulate its preemptions.

Why it exists: the stable-preemption issue's first symptom was the demo (seed 3 at
speed 4 never finished: 567 preemptions for 40 workloads). This replays the demo as
a new user runs it, seed after seed, and prints per seed whether it finished, its
preemptions, the most of one workload, wasted preemptions and the GPU-seconds lost,
read from each run's ``--summary`` JSON. Each run gets its own data directory (so
its own embedded Postgres), which lets ``--parallel`` runs not share a database.

    python bench/demo_stability.py [--seeds 0-19] [--speed 4] [--parallel 2]

The figures are the service's own counts of the decisions it committed; wall time
depends on the machine's load (the demo runs in real time, ``speed`` times faster).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def run_demo(seed: int, speed: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="queuemgr-demo-") as tmp:
        summary = Path(tmp) / "summary.json"
        env = {**os.environ, "QUEUEMGR_DATA_DIR": str(Path(tmp) / "data")}
        env.pop("QUEUEMGR_DATABASE_URL", None)
        cmd = [sys.executable, "-m", "queuemgr", "demo", "--plain", "--speed", str(speed)]
        proc = subprocess.run(
            [*cmd, "--seed", str(seed), "--summary", str(summary)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if not summary.exists():
            return {"seed": seed, "outcome": f"exit {proc.returncode}", "error": proc.stderr[-500:]}
        doc: dict[str, object] = json.loads(summary.read_text())
        doc["exit"] = proc.returncode
        return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0-19", help="e.g. 0-19 or 3,4 (default 0-19)")
    parser.add_argument("--speed", type=float, default=4.0)
    parser.add_argument("--parallel", type=int, default=1, help="demos at once (default 1)")
    args = parser.parse_args()
    chosen = seeds(args.seeds)
    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        docs = list(pool.map(lambda s: run_demo(s, args.speed), chosen))
    cols = (
        "seed",
        "outcome",
        "exit",
        "finished",
        "preemptions",
        "max per wl",
        "wasted",
        "lost GPU-s",
    )
    print(f"queuemgr demo --plain --speed {args.speed:g}, seeds {args.seeds}")
    print("".join(f"{c:>12}" for c in cols))
    for d in docs:
        lost = d.get("lost_gpu_seconds")
        row = (
            d["seed"], d.get("outcome"), d.get("exit"), d.get("finished"), d.get("preemptions"),
            d.get("max_preemptions_per_workload"), d.get("wasted_preemptions"),
            f"{lost:.0f}" if isinstance(lost, float) else lost,
        )  # fmt: skip
        print("".join(f"{v!s:>12}" for v in row))
        if "error" in d:
            print(f"  seed {d['seed']}: {d['error']}")
    finished = sum(1 for d in docs if d.get("outcome") == "finished")
    most = max((int(str(d.get("max_preemptions_per_workload") or 0)) for d in docs), default=0)
    wasted = sum(int(str(d.get("wasted_preemptions") or 0)) for d in docs)
    total = sum(int(str(d.get("preemptions") or 0)) for d in docs)
    print(
        f"finished {finished}/{len(docs)}; preemptions {total}; "
        f"most of one workload {most}; wasted {wasted}"
    )


if __name__ == "__main__":
    main()
