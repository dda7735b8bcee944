"""Replay the Philly trace under several scheduler policies, side by side in one run.

Why it exists: the policies issue asks whether reservations and usage-aware
ordering cut the wait of big gangs without hurting small jobs or utilization,
on the shared Philly trace at about 90 % offered load (160 nodes x 8 GPUs, 8
tenants with equal nominal quotas in one cohort). Each policy runs through the
same simulator in this process, so the ratios between them are fair even on a
noisy machine.

What the trace lacks is filled by documented rules, never presented as data:
- tenants: ``--assign-tenants 8 --seed 0`` (see docs/simulate.md);
- declared runtime limits: Philly has none, so by default (``--max-runtime
  partitions``) each job declares the smallest of 1 h, 4 h, 12 h, 1 d, 3 d, 7 d,
  30 d, 60 d that covers its duration, as a user picking a partition's time limit
  would (jobs never overrun); ``--max-runtime`` also takes the rules of
  ``queuemgr simulate --trace-max-runtime`` (none, actual, 'actual*F', ...).

Reported per policy: GPU utilization over the submission period; p50 and p95
wait of 1-GPU jobs and of gangs of 32 GPUs or more; and fairness as the
time-averaged deviation of each tenant's GPU allocation from the weighted
max-min (water-filling) fair allocation of the cluster given the tenants'
current demands (held + pending GPUs), over the periods with a backlog,
as a fraction of capacity: sum |alloc - fair| / (2 x capacity); and the ETA
error: for each job that had to wait, |actual start - the ETA its status gave
in its first cycle|, median and p90 (jobs with an unknown ETA are not counted).

With ``--preemption`` every tenant may reclaim its lent quota from any borrower
(``reclaim_within_cohort: Any``) and the cohort shares by fair-sharing
preemption, for all the policies alike; each then also reports its
preemptions, the most of any one workload, wasted preemptions and the
GPU-seconds lost to preemption as a share of those delivered. Utilization
counts only the GPU-seconds of runs that finished.

    python bench/policy_replay.py [--limit N] [--depth D] [--largest L] [--largest-min-gpus G]
        [--ordering fifo|usage] [--policies 1,3] [--max-runtime RULE] [--parallel]
        [--preemption] [--min-runtime S] [--plot waits.png] [--checkpoint DIR [--keep]]

With ``--checkpoint DIR`` each policy's whole state (engine and meter) is saved
every simulated 100,000 s and a later run with the same code, policy and jobs
resumes from it, so the whole trace with preemption (hours of CPU) can span
sittings; a resumed run decides exactly as one uninterrupted run
(tests/unit/sim/test_sim_engine.py), and "wall s" sums the sittings. With
``--keep`` every step's state stays too, to resume a run just before a case
worth following.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import pickle
import re
import sys
import time
from collections import defaultdict
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

from queuemgr.core.model import PreemptionPolicy, ReclaimWithinCohort, Workload
from queuemgr.core.policy import Ordering, SchedulerPolicy
from queuemgr.core.reasons import Decisions, PreemptionReason
from queuemgr.core.resources import GPU
from queuemgr.core.snapshot import Config, Snapshot
from queuemgr.sim.engine import Engine, Event
from queuemgr.sim.report import percentile
from queuemgr.sim.trace import MaxRuntimeRule, TraceError, load_trace, parse_max_runtime_rule
from queuemgr.spec.checks import InputError
from queuemgr.spec.scenario import SimWorkload, load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "bench" / "scenarios" / "philly-160x8.yaml"
TRACE = ROOT.parent / "shared" / "traces" / "philly.csv.gz"
LIMITS = [3600.0 * h for h in (1, 4, 12, 24, 72, 168, 720, 1440)]
PARTITIONS = "partitions"  # this benchmark's own rule for declared limits (declared_limit)
CHECKPOINT_STEP = 100_000.0  # simulated seconds between saves: minutes of the busy tail

# The targets for queuemgr's best policy against plain BestEffortFIFO.
TARGETS = {"p95 >=32": ("<=", 0.5), "p95 1-GPU": ("<=", 1.1), "utilization": (">=", 1.0)}


def policies(
    depth: int, largest: int, min_gpus: int, ordering: Ordering = Ordering.USAGE
) -> dict[str, SchedulerPolicy]:
    """The three policies of the issue: nothing of it, the defaults, and the best one."""
    best = f"reservations {depth} + {ordering.value}"
    if largest:
        best += f" + largest {largest}" + (f" (>={min_gpus} GPUs)" if min_gpus else "")
    return {
        "plain BestEffortFIFO": SchedulerPolicy(reservation_depth=0),
        "queuemgr defaults": SchedulerPolicy(),
        best: SchedulerPolicy(
            reservation_depth=depth,
            ordering=ordering,
            largest_reservations=largest,
            largest_min_gpus=min_gpus,
        ),
    }


def declared_limit(duration: float) -> float:
    return next((limit for limit in LIMITS if duration <= limit), max(duration, LIMITS[-1]))


def water_fill(demands: dict[str, float], capacity: float) -> dict[str, float]:
    """Equal-weight max-min fair shares of ``capacity`` given ``demands``."""
    fair = {k: 0.0 for k in demands}
    left, active = capacity, {k for k, d in demands.items() if d > 0}
    while active and left > 1e-9:
        share = left / len(active)
        done = {k for k in active if demands[k] - fair[k] <= share}
        if not done:
            for k in active:
                fair[k] += share
            break
        for k in done:
            left -= demands[k] - fair[k]
            fair[k] = demands[k]
        active -= done
    return fair


class Meter:
    """Observes cycles and events; computes the figures of one policy."""

    def __init__(self, workloads: dict[str, Workload], capacity: int) -> None:
        self.workloads = workloads
        self.gpus, self.capacity = {wid: w.gpus for wid, w in workloads.items()}, capacity
        self.submitted: dict[str, float] = {}
        self.queued: dict[str, float] = {}  # since when each waiting workload waits
        self.waits: dict[str, list[float]] = defaultdict(list)
        self.runs: dict[str, float] = {}
        self.busy: list[tuple[float, float, int]] = []
        self.last: tuple[float, float] | None = None  # (time, deviation) of the last cycle
        self.dev_area = 0.0
        self.dev_time = 0.0
        self._fresh: list[str] = []  # submitted since the last cycle
        self.predicted: dict[str, float | None] = {}  # ETA given in the arrival's first cycle
        self.eta_errors: list[float] = []

    def event(self, e: Event) -> None:
        wid, t = str(e["workload"]), float(e["t"])  # type: ignore[arg-type]
        if e["event"] == "submitted":
            self.submitted[wid] = self.queued[wid] = t
            self._fresh.append(wid)
        elif e["event"] == "admitted":
            # From when it last entered the queue: a victim's wait starts at its eviction.
            self.waits[wid].append(t - self.queued.pop(wid))
            self.runs[wid] = t
            eta = self.predicted.pop(wid, None)
            if eta is not None:
                self.eta_errors.append(abs(t - eta))
        elif e["event"] == "finished":
            self.busy.append((self.runs.pop(wid), t, self.gpus[wid]))
        elif e["event"] == "evicted":  # thrown away: not delivered
            self.runs.pop(wid)
            self.queued[wid] = t

    def cycle(self, now: float, snap: Snapshot, decided: Decisions, _took: float) -> None:
        # The ETA a newcomer is told in its first cycle, to compare with when it starts.
        admitted = decided.admitted_ids()
        for wid in self._fresh:
            w, cq = self.workloads[wid], snap.config.queue_for(self.workloads[wid])
            if wid not in admitted and cq is not None:
                self.predicted[wid] = decided.pending.eta_of(w, cq)
        self._fresh.clear()
        held: dict[str, float] = defaultdict(float)
        demand: dict[str, float] = defaultdict(float)
        for cq, per_flavor in snap.usage.items():
            for vec in per_flavor.values():
                held[cq] += vec.get(GPU, 0)
        for a in decided.admitted:
            held[a.admission.cluster_queue] += self.gpus[a.workload.id]
        backlog = 0.0
        for cq, queue in snap.pending.items():
            for run in queue.runs.values():
                g = self.gpus[run[0].id]
                n = sum(1 for w in run if w.id not in admitted)
                demand[cq] += g * n
                backlog += g * n
        for cq in held:
            demand[cq] += held[cq]
        if self.last is not None and self.last[1] >= 0:
            self.dev_area += self.last[1] * (now - self.last[0])
            self.dev_time += now - self.last[0]
        if backlog > 0:
            fair = water_fill(dict(demand), float(self.capacity))
            dev = sum(abs(held[k] - fair.get(k, 0.0)) for k in set(held) | set(fair))
            self.last = (now, dev / (2 * self.capacity))
        else:
            self.last = (now, -1.0)  # no backlog: this interval does not count

    def figures(self, first: float, last: float) -> dict[str, float | None]:
        used = sum(g * max(0.0, min(e, last) - max(s, first)) for s, e, g in self.busy)
        small = sorted(w for wid, ws in self.waits.items() for w in ws if self.gpus[wid] == 1)
        big = sorted(w for wid, ws in self.waits.items() for w in ws if self.gpus[wid] >= 32)
        return {
            "utilization": used / (self.capacity * (last - first)),
            "p50 1-GPU": percentile(small, 50),
            "p95 1-GPU": percentile(small, 95),
            "p50 >=32": percentile(big, 50),
            "p95 >=32": percentile(big, 95),
            "unfairness": self.dev_area / self.dev_time if self.dev_time else None,
            "ETA err p50": percentile(sorted(self.eta_errors), 50),
            "ETA err p90": percentile(sorted(self.eta_errors), 90),
        }


def cluster(
    preemption: bool, min_runtime: float, borrowing_max_runtime: float | None = None
) -> Config:
    """The benchmark's cluster; with ``preemption``, reclaim Any and fair sharing on."""
    config = load_scenario(SCENARIO).config
    if not preemption and borrowing_max_runtime is None:
        return config
    rule = PreemptionPolicy(reclaim_within_cohort=ReclaimWithinCohort.ANY, min_runtime=min_runtime)
    return Config.of(
        flavors=config.flavors.values(),
        cohorts=[
            dataclasses.replace(c, fair_sharing=c.fair_sharing or preemption)
            for c in config.cohorts.values()
        ],
        cluster_queues=[
            dataclasses.replace(
                cq,
                preemption=rule if preemption else cq.preemption,
                borrowing_max_runtime=borrowing_max_runtime,
            )
            for cq in config.cluster_queues.values()
        ],
        local_queues=config.local_queues.values(),
        nodes=config.nodes.values(),
    )


def run(
    policy: SchedulerPolicy,
    workloads: list[SimWorkload],
    meters: dict[str, Meter],
    name: str,
    config: Config,
    checkpoint: Path | None = None,
    keep: bool = False,
) -> dict[str, float | None]:
    capacity = sum(n.allocatable.get(GPU, 0) for n in config.nodes.values())
    key = _key(policy, workloads, config)
    saved = _load(checkpoint, name, key) if checkpoint is not None else None
    if saved is None:
        meter = Meter({sw.workload.id: sw.workload for sw in workloads}, capacity)
        engine = Engine(config, workloads, policy=policy, check_every=1000)
        marks, spent = {"next": 0.0}, 0.0
    else:
        engine, meter, marks, spent = saved
        meter.workloads = {sw.workload.id: sw.workload for sw in workloads}
    meters[name] = meter

    def observe(now: float, snap: Snapshot, decided: Decisions, took: float) -> None:
        meter.cycle(now, snap, decided, took)
        if now >= marks["next"]:  # a line per simulated 500,000 s, for a run of hours
            print(
                f"{name}: simulated {now:,.0f} s: {_so_far(engine, meter)}",
                file=sys.stderr,
                flush=True,
            )
            marks["next"] = now + 500_000

    engine.emit, engine.observer = meter.event, observe
    t0 = time.perf_counter()
    if checkpoint is None:
        engine.run()
    else:
        # In steps of simulated time, each saved: a later sitting resumes the same run.
        while not engine.done:
            engine.run(until=engine.result.end_time + CHECKPOINT_STEP)
            spent += time.perf_counter() - t0
            t0 = time.perf_counter()
            _save(checkpoint, name, key, (engine, meter, marks, spent), keep)
    spent += time.perf_counter() - t0
    out = meter.figures(min(meter.submitted.values()), max(meter.submitted.values()))
    tally = engine.tally
    delivered = sum(q.gpu_seconds for q in engine.result.queues.values())
    out["preemptions"] = float(tally.preemptions)
    out["max per wl"] = float(tally.most_per_workload)
    out["wasted"] = float(tally.wasted)
    out["lost share"] = tally.lost_gpu_seconds / delivered if delivered else None
    print(f"{name}: lost by reason: {_by_reason(tally.lost_by_reason, delivered)}", file=sys.stderr)
    res = engine.result  # jobs the run ended without finishing: their waits are not counted
    out["unfinished"] = float(res.pending_at_end + res.running_at_end + res.not_submitted)
    out["wall s"] = spent
    return out


def _so_far(engine: Engine, meter: Meter) -> str:
    """The figures up to now, so a run cut short still compares with one at the same time."""
    small = sorted(w for wid, ws in meter.waits.items() for w in ws if meter.gpus[wid] == 1)
    big = sorted(w for wid, ws in meter.waits.items() for w in ws if meter.gpus[wid] >= 32)
    delivered = sum(q.gpu_seconds for q in engine.result.queues.values())
    tally = engine.tally
    lost = tally.lost_gpu_seconds / delivered if delivered else 0.0
    return (
        f"p95 1-GPU {percentile(small, 95)}, p95 >=32 {percentile(big, 95)} "
        f"({len(big)} big admissions), preemptions {tally.preemptions}, "
        f"most {tally.most_per_workload}, wasted {tally.wasted}, lost {lost:.2%} "
        f"({_by_reason(tally.lost_by_reason, delivered)})"
    )


def _by_reason(lost: Mapping[PreemptionReason, float], delivered: float) -> str:
    return ", ".join(
        f"{reason.value} {v / delivered:.2%}" for reason, v in lost.items() if delivered
    )


def _key(policy: SchedulerPolicy, workloads: list[SimWorkload], config: Config) -> str:
    """What a saved run must match to be resumed: the code, the policy, cluster and jobs."""
    digest = hashlib.sha256()
    for path in [*sorted((ROOT / "queuemgr").rglob("*.py")), Path(__file__).resolve()]:
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    digest.update(repr((policy, config, len(workloads), workloads[-1:])).encode())
    return digest.hexdigest()


def _path(directory: Path, name: str) -> Path:
    return directory / (re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-") + ".pickle")


Saved = tuple[Engine, Meter, dict[str, float], float]


def _load(directory: Path, name: str, key: str) -> Saved | None:
    path = _path(directory, name)
    if not path.exists():
        return None
    try:
        with path.open("rb") as f:
            saved_key, state = pickle.load(f)
    except (OSError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        print(f"{name}: {path} is unreadable ({exc}); starting over", file=sys.stderr)
        return None
    if saved_key != key:
        print(f"{name}: {path} is of other code or settings; starting over", file=sys.stderr)
        return None
    print(f"{name}: resuming from {path} at {state[0].result.end_time:,.0f} s", file=sys.stderr)
    return state  # type: ignore[no-any-return]


def _save(directory: Path, name: str, key: str, state: Saved, keep: bool = False) -> None:
    engine, meter = state[0], state[1]
    hooks, engine.emit, engine.observer = (engine.emit, engine.observer), None, None
    jobs, meter.workloads = meter.workloads, {}  # the trace is read again on resuming
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = _path(directory, name)
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as f:
            pickle.dump((key, state), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # a sitting cut short keeps the previous step whole
        if keep:  # every step, to go back to the state just before something happened
            kept = path.with_name(f"{path.stem}-at-{engine.result.end_time:012.0f}.pickle")
            kept.unlink(missing_ok=True)
            os.link(path, kept)
    finally:
        engine.emit, engine.observer = hooks
        meter.workloads = jobs


def _run_alone(
    policy: SchedulerPolicy,
    workloads: list[SimWorkload],
    name: str,
    config: Config,
    checkpoint: Path | None,
    keep: bool,
) -> tuple[dict[str, float | None], Meter]:
    meters: dict[str, Meter] = {}
    out = run(policy, workloads, meters, name, config, checkpoint, keep)
    meters[name].workloads = {}  # the parent has them; only the figures travel back
    return out, meters[name]


def load_jobs(limit: int = 0, rule: MaxRuntimeRule | None = None) -> list[SimWorkload]:
    """The trace's jobs as every policy gets them: tenants assigned, limits declared
    (by ``rule``, or by this benchmark's partitions when it is None)."""
    scenario = load_scenario(SCENARIO)
    namespaces = {ns for (ns, name) in scenario.config.local_queues if name == "default"}
    jobs = load_trace(
        TRACE, namespaces=namespaces, assign_tenants=8, seed=0, max_runtime=rule or "none"
    ).workloads
    if limit:
        jobs = jobs[:limit]
    if rule is None:
        jobs = [
            dataclasses.replace(
                sw,
                workload=dataclasses.replace(sw.workload, max_runtime=declared_limit(sw.runtime)),
            )
            for sw in jobs
        ]
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N jobs")
    parser.add_argument("--plot", type=Path, help="write a PNG of p95 waits by gang size")
    parser.add_argument(
        "--parallel", action="store_true", help="run the policies in parallel processes"
    )
    parser.add_argument(
        "--depth", type=int, default=4, help="reservation_depth of the third policy (default 4)"
    )
    parser.add_argument(
        "--largest",
        type=int,
        default=1,
        help="largest_reservations of the third policy (default 1)",
    )
    parser.add_argument(
        "--largest-min-gpus",
        type=int,
        default=32,
        help="largest_min_gpus of the third policy (default 32: gangs of four 8-GPU nodes "
        "or more; 9 lets every multi-node gang go first)",
    )
    parser.add_argument(
        "--ordering",
        choices=[o.value for o in Ordering],
        default=Ordering.USAGE.value,
        help="ordering of the third policy (default usage)",
    )
    parser.add_argument(
        "--policies",
        default="",
        help="comma-separated 1-based numbers of the policies to run (default: all); "
        "ratios need policy 1",
    )
    parser.add_argument(
        "--max-runtime",
        default=PARTITIONS,
        metavar="RULE",
        help="declared runtime limits: partitions (default: the smallest of 1 h ... 60 d "
        "covering the duration), or a rule of queuemgr simulate --trace-max-runtime: "
        "auto, none, column, actual, 'actual*F'",
    )
    parser.add_argument(
        "--preemption",
        action="store_true",
        help="every tenant reclaims with reclaim_within_cohort Any, and the cohort shares "
        "by fair-sharing preemption (all policies alike)",
    )
    parser.add_argument(
        "--min-runtime",
        type=float,
        default=0.0,
        help="with --preemption: each ClusterQueue's preemption.min_runtime, seconds (default 0)",
    )
    parser.add_argument(
        "--borrowing-max-runtime",
        type=float,
        default=None,
        metavar="SECONDS",
        help="each ClusterQueue's borrowing_max_runtime: only workloads declaring a "
        "max_runtime of at most this borrow (default: none, any workload borrows)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        metavar="DIR",
        help="save each policy's run to DIR every simulated 100,000 s and resume from there "
        "when the same code, policy and jobs run again (a replay longer than a sitting)",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="with --checkpoint: also keep every step's state as NAME-at-TIME.pickle, to "
        "resume just before something the run did",
    )
    args = parser.parse_args()
    if args.checkpoint is not None:
        try:  # up front: not after the first 100,000 simulated seconds
            args.checkpoint.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            parser.error(f"--checkpoint {args.checkpoint}: {exc.strerror or exc}")
    if args.borrowing_max_runtime is not None and not 0 < args.borrowing_max_runtime < 1e9:
        parser.error(f"--borrowing-max-runtime {args.borrowing_max_runtime:g}: not a duration")
    config = cluster(args.preemption, args.min_runtime, args.borrowing_max_runtime)
    rule = None
    if args.max_runtime != PARTITIONS:
        try:
            rule = parse_max_runtime_rule(args.max_runtime, option="--max-runtime")
        except InputError as exc:
            parser.error(str(exc))
    try:
        jobs = load_jobs(args.limit, rule)
    except TraceError as exc:
        parser.error(str(exc))
    meters: dict[str, Meter] = {}
    chosen = policies(args.depth, args.largest, args.largest_min_gpus, Ordering(args.ordering))
    if args.policies:
        names = list(chosen)
        picked = {names[int(i) - 1] for i in args.policies.split(",")}
        chosen = {name: p for name, p in chosen.items() if name in picked}
    if args.parallel:
        # One process per policy (fork): each gets the same jobs; only figures come back.
        with ProcessPoolExecutor(len(chosen), mp_context=get_context("fork")) as pool:
            futures = {
                name: pool.submit(_run_alone, p, jobs, name, config, args.checkpoint, args.keep)
                for name, p in chosen.items()
            }
            results = {}
            # Each policy's figures as soon as it ends: a run cut short keeps the finished ones.
            for future in as_completed(futures.values()):
                name = next(n for n, f in futures.items() if f is future)
                results[name], meters[name] = future.result()
                print(f"finished: {name}: {results[name]}", file=sys.stderr, flush=True)
            results = {name: results[name] for name in futures}
    else:
        results = {
            name: run(policy, jobs, meters, name, config, args.checkpoint, args.keep)
            for name, policy in chosen.items()
        }
    keys = [
        "utilization",
        "p50 1-GPU",
        "p95 1-GPU",
        "p50 >=32",
        "p95 >=32",
        "unfairness",
        "ETA err p50",
        "ETA err p90",
        "preemptions",
        "max per wl",
        "wasted",
        "lost share",
        "unfinished",
        "wall s",
    ]
    print(
        f"{len(jobs)} Philly jobs on 160x8 GPUs, 8 assigned tenants, "
        f"declared limits by rule {args.max_runtime!r}"
        + (f", preemption on (min_runtime {args.min_runtime:g} s)" if args.preemption else "")
        + (
            f", borrowing_max_runtime {args.borrowing_max_runtime:g} s"
            if args.borrowing_max_runtime is not None
            else ""
        )
    )
    print(f"{'policy':<48}" + "".join(f"{k:>13}" for k in keys))
    for name, res in results.items():
        print(f"{name:<48}" + "".join(_cell(k, res[k]) for k in keys))
    base = results.get("plain BestEffortFIFO")
    if base is not None:
        print("ratios against plain BestEffortFIFO (same run), targets: " + _targets())
        for name, res in results.items():
            ratios = [f"{k} {_ratio(res[k], base[k])}" for k in TARGETS]
            print(f"  {name:<48}" + ", ".join(ratios))
    if args.plot is not None:
        plot(meters, args.plot, f"first {len(jobs)}" if args.limit else f"all {len(jobs)}")
        print(f"plot written to {args.plot}")


def plot(meters: dict[str, Meter], path: Path, jobs: str) -> None:
    """Grouped bars: p95 wait (hours) per gang-size bucket, one bar per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = [(1, 1, "1"), (2, 8, "2-8"), (9, 31, "9-31"), (32, 10**9, ">=32")]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(meters)
    for i, (name, meter) in enumerate(meters.items()):
        heights = []
        for lo, hi, _ in buckets:
            waits = sorted(
                w for wid, ws in meter.waits.items() for w in ws if lo <= meter.gpus[wid] <= hi
            )
            heights.append((percentile(waits, 95) or 0.0) / 3600)
        xs = [b + i * width for b in range(len(buckets))]
        ax.bar(xs, heights, width, label=name)
    ax.set_xticks([b + 0.4 - width / 2 for b in range(len(buckets))], [b[2] for b in buckets])
    ax.set_xlabel("GPUs per job")
    ax.set_ylabel("p95 wait (hours)")
    ax.set_title(f"Philly, {jobs} jobs, 160x8 GPUs, 8 assigned tenants")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _cell(key: str, value: float | None) -> str:
    if value is None:
        return f"{'-':>13}"
    if key in ("utilization", "lost share"):
        return f"{value:>13.4f}"  # the target is met or missed by fractions of a percent
    return f"{value:>13.3f}" if key == "unfairness" else f"{value:>13.0f}"


def _targets() -> str:
    return ", ".join(f"{k} {op} {v:g}x" for k, (op, v) in TARGETS.items())


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "n/a"
    return f"{value / base:.4f}x"


if __name__ == "__main__":
    main()
