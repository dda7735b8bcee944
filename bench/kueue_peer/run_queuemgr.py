"""queuemgr's side of Kueue's scheduler benchmark (``configs/baseline``), on the same machine.

    python bench/kueue_peer/run_queuemgr.py [--runs N] [--scale F] [--qps Q --burst B]
                                            [--scheduler KNOB=VALUE ...] [--out DIR] [--json FILE]

Why it exists: ``run_kueue.py`` runs Kueue v0.17.0's own ``runner`` and
``minimalkueue`` against the control plane of ``tests/controlplane``; this
runs ``queuemgr serve`` (``backend: kubernetes``, a scratch database on the
configured Postgres) against a fresh etcd and kube-apiserver of the same
build and flags, with the same workload stream, and prints the same figures
under the same names, so the two tables sit side by side.

The stream is read from Kueue's own ``generator.yaml`` (in the Go module
cache, found by ``build.py``): 5 cohorts x 6 ClusterQueues (nominal 20 cpu,
borrowing limit 100, ``reclaimWithinCohort: Any``, ``withinClusterQueue:
LowerPriority``), per queue 350 small (1 cpu, 0.2 s, priority 50, every
0.1 s), 100 medium (5 cpu, 0.5 s, 100, every 0.5 s) and 50 large (20 cpu,
1 s, 200, every 1.2 s): 15,000 suspended, labelled ``batch/v1`` Jobs, each
stream sleeping its interval before each create, from a child process.
A runner (``runner.py``) plays Kueue's: it completes each Job once its
runtime has passed since queuemgr unsuspended it, with one status patch.

What must stay true: nothing but queuemgr admits, suspends or preempts (no
controller-manager: a Job gets no pods, and only the runner ends Jobs); the
figures keep ``run_kueue.py``'s names where the meaning is the same
(``minimalkueue`` becomes ``queuemgr``); queuemgr's client budget is
``--qps``/``--burst`` (default 50/100, minimalkueue's); ``--start-concurrency``
how many admitted Jobs it unsuspends at once (default 8, ``serve``'s).

Figures: ``first arrival to last finish`` is from the first Job's first
watch event to the last Job's ``Complete``; ``cq usage`` is quota held (from
a Job's admission in the store to its finish there, as a ClusterQueue's
usage counts it in Kueue) over that span against nominal quota, ``Jobs
running`` the same for the time the Jobs ran (unsuspended to ``Complete``);
times to admission are the recorder's (first event to the last
unsuspension), and ``store admission to unsuspension`` the mean wait of an
admitted Job for its unsuspending patch; ``evictions`` counts
running -> suspended, so a victim whose Job completed before its suspension
landed is none (``preemptions decided`` is queuemgr's own count, from its
``/metrics``); ``queuemgr CPU``/``peak RSS`` are the serve process's whole
life (``wait4``, as Kueue's runner measures minimalkueue); ``postgres CPU``
is the database server's over the stream; API requests are
``apiserver_request_total`` over the stream, all of them and without the
bench's own (creates, completions, its watch); ``machine CPU busy`` is all
cores over the stream, from ``/proc/stat``, whoever used them.

What still differs from Kueue's run:

- workloads are Jobs (queuemgr's unit), not Kueue Workload objects, and
  queuemgr keeps its state in Postgres (its CPU is shown apart); so
  "admitted" here is the Job unsuspended (what a tenant waits for), while
  Kueue's recorder takes the Workload's ``Admitted`` condition, and
  minimalkueue runs no job integration (no Job to create a Workload from,
  none to unsuspend): per admission queuemgr's path is longer;
- queuemgr places pods on nodes and cannot run quota-only: one Node whose
  allocatable cpu is the whole nominal quota (600) is registered, so nodes
  never bind (Kueue's flavor has no nodes at all);
- the scheduler knobs default to the ones documented as Kueue's behaviour,
  ``requeue_backoff_base=0`` (minimalkueue has no waitForPodsReady, so a
  preempted workload queues again at once) and ``reservation_depth=0``;
  queuemgr's own other rules stay (in-nominal demand first, no loans after 3
  preemptions);
- queuemgr writes its queue status (annotations) on pending Jobs, at most
  ``status_qps`` (5/s) of its budget, and logs at INFO (minimalkueue at ERROR);
- ``pods_ready`` is off (there are no pods), as minimalkueue has no
  waitForPodsReady;
- the control plane is the harness's (static tokens, RBAC, TLS) plus
  Kueue's two in-flight limits; envtest's flags differ in the rest;
- the runner and generator are Python (Kueue's are Go, client QPS 1000):
  they share the machine with everything else, as Kueue's do.

Exit status: 0 when every run finished, 1 when a build or run failed, 2 for a
usage error or when no ``go`` toolchain is on PATH.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.kueue_peer import build as kueue_build  # noqa: E402
from bench.kueue_peer import probes  # noqa: E402
from bench.kueue_peer.run_kueue import CLASSES, ProcSampler, _table  # noqa: E402
from bench.kueue_peer.runner import Runner  # noqa: E402
from bench.kueue_peer.stream import Baseline, generate, load_baseline  # noqa: E402
from bench.servicebench import scratch_database  # noqa: E402
from queuemgr.core.policy import SchedulerPolicy  # noqa: E402
from queuemgr.k8s.reflector import Reflector  # noqa: E402
from queuemgr.spec.checks import InputError  # noqa: E402
from queuemgr.spec.knobs import override_policy, policy_knobs  # noqa: E402
from tests.controlplane import build as cp_build  # noqa: E402
from tests.controlplane.harness import (  # noqa: E402
    ControlPlaneError,
    free_port,
    start_control_plane,
)

KUEUE_APISERVER_ARGS = ("--max-requests-inflight=800", "--max-mutating-requests-inflight=400")
KUEUE_KNOBS = ("requeue_backoff_base=0", "reservation_depth=0")


class RunError(RuntimeError):
    """A benchmark run failed."""


def _serve(
    plane: Any, db_url: str, args: argparse.Namespace, knobs: dict[str, Any], work: Path
) -> tuple[subprocess.Popen[bytes], int, Path]:
    """Start ``queuemgr serve`` in Kubernetes mode; return it once it leads."""
    port = free_port()
    config = {
        "database_url": db_url,
        "backend": "kubernetes",
        "http_address": f"127.0.0.1:{port}",
        "replica": "kueue-peer",
        "scheduler": knobs,
        "kubernetes": {
            "kubeconfig": str(plane.kubeconfig()),
            "qps": args.qps,
            "burst": args.burst,
            "status_qps": min(5.0, args.qps),
            "start_concurrency": args.start_concurrency,
            "pods_ready": {"enabled": False},
        },
    }
    path = work / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    log = work / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "queuemgr", "serve", "--config", str(path)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RunError(f"queuemgr serve exited {proc.returncode}:\n{probes.tail(log)}")
        if probes.queuemgr_leads(port):
            return proc, port, log
        time.sleep(0.2)
    proc.kill()
    raise RunError(f"queuemgr serve not leading after 120 s:\n{probes.tail(log)}")


def _wait(
    runner: Runner, serve: subprocess.Popen[bytes], gen: Any, out: Any, log: Path, timeout: float
) -> tuple[dict[str, Any], list[float]]:
    """Until every Job finished; the generator's report and the 1-min loads seen."""
    deadline = time.monotonic() + timeout
    report: dict[str, Any] = {}
    loads = []
    while not runner.done.wait(1.0):
        loads.append(os.getloadavg()[0])
        while not out.empty():
            _, report = out.get()
            if report.get("errors"):
                raise RunError("creating Jobs failed: " + "; ".join(report["errors"]))
        if serve.poll() is not None:
            raise RunError(f"queuemgr serve exited {serve.returncode}:\n{probes.tail(log)}")
        if not report and not gen.is_alive():
            raise RunError(f"the generator process died (exit {gen.exitcode})")
        if runner.errors:
            raise RunError("completing Jobs failed: " + "; ".join(runner.errors[:3]))
        if time.monotonic() > deadline:
            seen = runner.summary()
            raise RunError(
                f"not done after {timeout / 60:.0f} min: {seen['count']} Jobs seen, "
                f"{sum(s.finished is not None for s in runner.jobs.values())} finished"
            )
    if not report:
        _, report = out.get(timeout=30)
    return report, loads


def run_once(
    args: argparse.Namespace,
    plane_bins: Any,
    baseline: Baseline,
    knobs: dict[str, Any],
    work: Path,
) -> tuple[dict[str, float | None], dict[str, Any]]:
    started = time.monotonic()
    sampler = ProcSampler(os.getpid())
    sampler.start()
    ctx = mp.get_context("spawn")
    try:
        with (
            scratch_database("kueuepeer") as db_url,
            start_control_plane(
                plane_bins, work / "cp", controllers=False, apiserver_args=KUEUE_APISERVER_ARGS
            ) as plane,
        ):
            probes.setup_cluster(plane, baseline)
            probes.setup_queues(db_url, baseline)
            serve, port, log = _serve(plane, db_url, args, knobs, work)
            serve_started = time.monotonic()
            watch: Reflector | None = None
            runner: Runner | None = None
            gen: Any = None
            try:
                watch, runner = probes.start_runner(plane, baseline.total)
                go, out = ctx.Event(), ctx.Queue()
                api = {"url": plane.url, "ca": str(plane.ca_file), "token": plane.admin_token}
                gen = ctx.Process(
                    target=generate, args=(api, list(baseline.sets), go, out), daemon=True
                )
                gen.start()
                if out.get(timeout=120)[0] != "ready":
                    raise RunError("the generator process did not start")
                before = probes.snapshot(plane, db_url)
                go.set()
                report, loads = _wait(runner, serve, gen, out, log, args.timeout * 60)
                after = probes.snapshot(plane, db_url)
                queuemgr_metrics = probes.queuemgr_metrics(port)
                summary = runner.summary()
                span = summary["last"] - summary["first"]
                store = probes.store_figures(db_url, runner, baseline.nominal_cpu(), span)
            finally:
                for part in (runner, watch):
                    if part is not None:
                        part.stop()
                if gen is not None:
                    gen.join(10)
                    if gen.is_alive():
                        gen.terminate()
                cpu, rss = probes.stop_and_reap(serve)
                serve_wall = time.monotonic() - serve_started
            if args.out:
                (work / "jobs.csv").write_text(runner.csv())
    finally:
        sampler.stop()
    figures: dict[str, float | None] = {
        "runner wall (s)": time.monotonic() - started,
        "queuemgr wall (s)": serve_wall,
        "first arrival to last finish (s)": span,
        "cq usage (% of nominal)": store["cq usage (% of nominal)"],
        "Jobs running (% of nominal)": (
            100 * summary["cpu_seconds"] / (baseline.nominal_cpu() * span)
        ),
    }
    for cls in CLASSES:
        figures[f"mean time to admission, {cls} (s)"] = summary.get(cls)
    figures["workloads recorded"] = summary["count"]
    figures["store admission to unsuspension (s)"] = store["store admission to unsuspension (s)"]
    figures["evictions"] = summary["evictions"]
    figures["preemptions decided (queuemgr)"] = queuemgr_metrics.get(
        "queuemgr_preempted_workloads_total"
    )
    starts = queuemgr_metrics.get("queuemgr_admission_start_seconds_count")
    figures["admission to start, queuemgr's clock (s)"] = (
        queuemgr_metrics["queuemgr_admission_start_seconds_sum"] / starts if starts else None
    )
    phases = {
        k.split("phase=", 1)[1].rstrip("}"): v
        for k, v in queuemgr_metrics.items()
        if k.startswith("queuemgr_cycle_phase_seconds_total")
    }
    figures["loop busy (s)"] = sum(phases.values()) if phases else None
    for phase in ("finish", "load", "schedule", "commit", "apply", "observe"):
        figures[f"loop {phase} (s)"] = phases.get(phase)
    figures["queuemgr CPU (s)"] = cpu
    figures["queuemgr peak RSS (MiB)"] = rss
    figures["postgres CPU (s)"] = probes.delta(before, after, "postgres_cpu")
    for name in ("kube-apiserver", "etcd"):
        figures[f"{name} CPU (s)"] = sampler.total(name, sampler.cpu)
        figures[f"{name} peak RSS (MiB)"] = sampler.total(name, sampler.peak_rss_mib)
    requests = after["requests"] - before["requests"]
    # The bench's own: creates, completions, the /metrics read of `before`, and its watch
    # requests after the first list and watch (which began before `before`).
    ours = report["created"] + runner.patches + 1 + watch.lists - 1 + watch.watches - 1
    figures["API requests / admitted workload"] = requests / summary["count"]
    figures["queuemgr API requests / workload"] = (requests - ours) / summary["count"]
    figures["machine CPU busy (%)"] = probes.busy_percent(before, after)
    figures["load average, 1 min (mean)"] = sum(loads) / len(loads) if loads else None
    details = {
        "create seconds": report.get("seconds"),
        "completions refused as stale": runner.stale,
        "requests by verb": probes.by_verb(before, after),
        "queuemgr metrics": queuemgr_metrics,
    }
    return figures, details


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="how many runs (default 1)")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="fraction of each workload set's count (default 1)"
    )
    parser.add_argument("--qps", type=float, default=50.0, help="queuemgr's client QPS (50)")
    parser.add_argument("--burst", type=int, default=100, help="queuemgr's client burst (100)")
    parser.add_argument(
        "--start-concurrency",
        type=int,
        default=8,
        help="admitted Jobs queuemgr unsuspends at once (8, its default)",
    )
    parser.add_argument(
        "--scheduler",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help=f"a scheduler knob, after {' '.join(KUEUE_KNOBS)}",
    )
    parser.add_argument("--out", type=Path, help="keep each run's files in OUT/run-<i>")
    parser.add_argument("--json", type=Path, help="write the figures of every run to FILE")
    parser.add_argument("--timeout", type=int, default=15, help="minutes a run may take (15)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.timeout < 1 or args.burst < 1 or args.start_concurrency < 1:
        parser.error("--runs, --timeout, --burst and --start-concurrency must be at least 1")
    if not 0 < args.scale <= 1 or not args.qps > 0:
        parser.error("--scale must be in (0, 1] and --qps positive")
    try:
        policy = override_policy(SchedulerPolicy(), [*KUEUE_KNOBS, *args.scheduler], "--scheduler")
    except InputError as error:
        parser.error(str(error))
    knobs = {k: v for k, v in policy_knobs(policy).items() if k != "usage_resource_weights"}
    try:
        plane_bins = cp_build.ensure_built()
        go = cp_build.go_command()
        if go is None:
            raise cp_build.GoMissing("no `go` on PATH: cannot find Kueue's generator config")
        generator = kueue_build.source_dir(go) / "test/performance/scheduler/configs/baseline"
        baseline = load_baseline(generator / "generator.yaml", args.scale)
    except cp_build.GoMissing as error:
        print(f"kueue-peer: {error}", file=sys.stderr)
        return 2
    except (cp_build.BuildError, OSError, ValueError, KeyError, yaml.YAMLError) as error:
        print(f"kueue-peer: cannot prepare: {error}", file=sys.stderr)
        return 1
    print(
        f"queuemgr {probes.revision()}, kubernetes {plane_bins.kubernetes_version}, "
        f"etcd {plane_bins.etcd_version}; qps {args.qps:g}, burst {args.burst}; "
        f"{', '.join(f'{k}={v}' for k, v in knobs.items())}"
    )
    print(
        f"{baseline.total} Jobs in {len(baseline.queues)} ClusterQueues (scale {args.scale:g}); "
        f"cpu-seconds / nominal quota: {baseline.cpu_seconds() / baseline.nominal_cpu():.1f} s; "
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    results, details = [], []
    with tempfile.TemporaryDirectory(prefix="kueue-peer-queuemgr-") as tmp:
        for i in range(args.runs):
            work = (args.out or Path(tmp)) / f"run-{i + 1}"
            work.mkdir(parents=True, exist_ok=True)
            print(f"run {i + 1}/{args.runs}: {work}", file=sys.stderr, flush=True)
            try:
                figures, extra = run_once(args, plane_bins, baseline, knobs, work)
            except (RunError, ControlPlaneError) as error:
                print(f"kueue-peer: run {i + 1} failed: {error}", file=sys.stderr)
                return 1
            except Exception as error:  # the database, the API, the files: say which
                print(f"kueue-peer: run {i + 1} failed: {error!r}", file=sys.stderr)
                return 1
            except KeyboardInterrupt:
                print("kueue-peer: interrupted", file=sys.stderr)
                return 1
            results.append(figures)
            details.append(extra)
            if args.out:
                (work / "details.json").write_text(json.dumps(extra, indent=2))
            span = figures["first arrival to last finish (s)"] or 0
            print(f"run {i + 1}: {span:.0f} s", file=sys.stderr)
    print(_table(results))
    if args.json:
        document = {
            "queuemgr": probes.revision(),
            "kubernetes": plane_bins.kubernetes_version,
            "qps": args.qps,
            "burst": args.burst,
            "start_concurrency": args.start_concurrency,
            "scale": args.scale,
            "scheduler": knobs,
            "runs": results,
            "details": details,
        }
        args.json.write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
