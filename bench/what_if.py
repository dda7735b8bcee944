"""Resume a kept policy-replay state under this tree's code, and list what it evicts.

Why it exists: a change to victim choice first shows as fewer GPU-seconds lost in
one stretch of the Philly replay, and reaching that stretch from the start takes an
hour or more. ``policy_replay.py --checkpoint DIR --keep`` keeps the state of every
step; this loads one of them, made by any code, runs it to ``--until`` under the
code of this tree, and prints the figures at both ends and every eviction of the
stretch with the work it threw away.

What must stay true: its figures are a what-if, never a run of this code from the
start (the state it resumes was made by whatever code wrote it); docs quote them
only as such, next to the command. The jobs are rebuilt exactly as
``policy_replay.py`` builds them (its ``load_jobs``), so the checkpoint must come
from a run with the default ``--max-runtime`` and no ``--limit``.

    python bench/what_if.py DIR/NAME-at-TIME.pickle --until 4600000 [--top 20]
"""

from __future__ import annotations

import argparse
import functools
import gc
import pickle
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's queuemgr, whatever is installed
sys.path.insert(0, str(ROOT / "bench"))

import policy_replay  # noqa: E402
from policy_replay import Saved, _so_far, load_jobs  # noqa: E402

from queuemgr.core.reasons import Eviction  # noqa: E402
from queuemgr.core.resources import GPU  # noqa: E402
from queuemgr.core.snapshot import Config  # noqa: E402


@dataclass(frozen=True, kw_only=True)
class Lost:
    """One eviction of the stretch and what it threw away."""

    at: float
    victim: str
    gpus: int
    ran: float
    loan: bool
    evictions: int
    reason: str
    preemptor: str
    preemptor_gpus: int

    @property
    def gpu_seconds(self) -> float:
        return self.gpus * self.ran


class _Unpickler(pickle.Unpickler):
    """policy_replay.py pickles its Meter as ``__main__.Meter``: here it is a module."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "__main__":
            return getattr(policy_replay, name)
        return super().find_class(module, name)


def _forget_derived() -> None:
    """Drop what a Config derives once (its cached properties): a state saved by other
    code may hold them in that code's shape; this tree's code derives them again."""
    derived = [name for name, v in vars(Config).items() if isinstance(v, functools.cached_property)]
    for obj in gc.get_objects():
        if isinstance(obj, Config):
            for name in derived:
                obj.__dict__.pop(name, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a state kept by policy_replay.py --keep")
    parser.add_argument("--until", type=float, required=True, help="simulated time to stop at, s")
    parser.add_argument("--top", type=int, default=20, help="evictions listed (default 20)")
    args = parser.parse_args()
    try:
        with args.checkpoint.open("rb") as f:
            _key, state = _Unpickler(f).load()
    except (OSError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        parser.error(f"{args.checkpoint}: unreadable ({exc})")
    saved: Saved = state
    _forget_derived()
    engine, meter, _marks, _spent = saved
    start = engine.result.end_time
    if args.until <= start:
        parser.error(f"--until {args.until:,.0f}: the state is already at {start:,.0f} s")
    jobs = load_jobs()
    meter.workloads = {sw.workload.id: sw.workload for sw in jobs}
    gpus = {wid: w.total_requests.get(GPU, 0) for wid, w in meter.workloads.items()}
    seen: list[Lost] = []
    evict = engine._evict

    def logged(now: float, e: Eviction) -> None:
        a = e.victim
        seen.append(
            Lost(
                at=now,
                victim=a.workload.id,
                gpus=a.held.get(GPU, 0),
                ran=now - a.admitted_at,
                loan=a.admission.borrowing,
                evictions=a.workload.evictions,
                reason=e.reason.value,
                preemptor=e.preemptor,
                preemptor_gpus=gpus.get(e.preemptor, 0),
            )
        )
        evict(now, e)

    engine._evict = logged  # type: ignore[method-assign]
    engine.emit, engine.observer = meter.event, meter.cycle
    print(f"what-if from {args.checkpoint.name} at {start:,.0f} s under this tree's code")
    print(f"  at {start:,.0f} s: {_so_far(engine, meter)}")
    while not engine.done and engine.result.end_time < args.until:
        # In steps, each with a line: a busy stretch takes many minutes.
        engine.run(until=min(args.until, engine.result.end_time + 50_000))
        print(f"  at {engine.result.end_time:,.0f} s: {len(seen)} evictions", flush=True)
    print(f"  at {engine.result.end_time:,.0f} s: {_so_far(engine, meter)}")
    total = sum(x.gpu_seconds for x in seen)
    print(f"stretch: {len(seen)} evictions, {total:,.0f} GPU-s lost")
    kinds: dict[tuple[str, str], list[float]] = defaultdict(list)
    for x in seen:
        kinds[(x.reason, "loan" if x.loan else "due")].append(x.gpu_seconds)
    for (reason, kind), lost in sorted(kinds.items(), key=lambda kv: -sum(kv[1])):
        share = sum(lost) / total if total else 0.0
        print(f"  {reason} of {kind}s: {len(lost)} evictions, {sum(lost):,.0f} ({share:.0%})")
    print(f"the {args.top} costliest:")
    for x in sorted(seen, key=lambda x: -x.gpu_seconds)[: args.top]:
        print(
            f"  {x.at:,.0f} s {x.victim} {x.gpus} GPUs ran {x.ran:,.0f} s "
            f"({'loan' if x.loan else 'due'}, evicted {x.evictions} before) "
            f"lost {x.gpu_seconds:,.0f}: {x.reason} by {x.preemptor} ({x.preemptor_gpus} GPUs)"
        )


if __name__ == "__main__":
    main()
