"""``queuemgr simulate``: a scenario or a trace through the simulator.

Why it exists: the simulator is the same scheduler on virtual time, and this is
how people reach it. It only parses options, calls into ``queuemgr.sim`` and
reports; imported when the command runs, so other commands do not pay for it.

What must stay true: bad input (usage, scenario, trace) exits 2 with a message on
stderr that names the file and the YAML path or line; a failure exits 1.
Machine-readable output (``-`` for events or summary) goes to stdout and nothing
else is mixed into it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import IO, TypeVar

import click

from queuemgr.core.snapshot import Config
from queuemgr.sim.engine import Engine
from queuemgr.sim.gpu_fraction import DEFAULT_RULE, GpuFractionRule, parse_gpu_fraction_rule
from queuemgr.sim.report import EventWriter, print_table, summarize
from queuemgr.sim.trace import MaxRuntimeRule, load_trace, parse_max_runtime_rule
from queuemgr.spec.checks import InputError
from queuemgr.spec.knobs import override_policy
from queuemgr.spec.scenario import load_scenario

T = TypeVar("T")

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


def _rule(parse: Callable[..., T], option: str) -> Callable[[object, object, str | None], T | None]:
    """A click callback parsing an option's rule; bad input is a usage error (exit 2)."""

    def callback(_ctx: object, _param: object, value: str | None) -> T | None:
        if value is None:
            return None
        try:
            return parse(value, option=option)
        except InputError as exc:
            raise click.UsageError(str(exc)) from None

    return callback


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--trace", type=click.Path(dir_okay=False, path_type=Path), help="Job trace CSV[.gz]."
)
@click.option("--assign-tenants", type=click.IntRange(min=1), help="Assign tenant-0..N-1 to jobs.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --assign-tenants.")
@click.option(
    "--trace-max-runtime",
    "max_runtime",
    metavar="RULE",
    callback=_rule(parse_max_runtime_rule, "--trace-max-runtime"),
    help="Trace jobs' declared runtime limits: auto (default: the max_runtime_s column "
    "where given), none, column, actual or 'actual*F' (duration x F, F >= 1).",
)
@click.option(
    "--trace-gpu-fraction",
    "gpu_fraction",
    metavar="RULE",
    callback=_rule(parse_gpu_fraction_rule, "--trace-gpu-fraction"),
    help="Trace pods' fractions of a GPU (gpu_milli_per_worker): timeslice:N (default "
    f"{DEFAULT_RULE}: ceil(f*N/1000) nvidia.com/gpu.shared), mig (the smallest A100 MIG "
    "profile that covers f) or round-up (one whole nvidia.com/gpu).",
)
@click.option("--events", "events_path", help="Write events as JSON lines ('-' for stdout).")
@click.option("--summary", "summary_path", help="Write the JSON summary ('-' for stdout).")
@click.option("--until", type=click.FloatRange(min=0), help="Stop after this virtual time (s).")
@click.option(
    "--scheduler",
    "overrides",
    multiple=True,
    metavar="KNOB=VALUE",
    help="Override a scheduler: knob of the scenario (repeatable).",
)
def simulate(
    scenario: Path,
    trace: Path | None,
    assign_tenants: int | None,
    seed: int,
    max_runtime: MaxRuntimeRule | None,
    gpu_fraction: GpuFractionRule | None,
    events_path: str | None,
    summary_path: str | None,
    until: float | None,
    overrides: tuple[str, ...],
) -> None:
    """Replay SCENARIO (and optionally a trace) through the scheduler in virtual time."""
    if assign_tenants is not None and trace is None:
        raise click.UsageError("--assign-tenants needs --trace")
    if max_runtime is not None and trace is None:
        raise click.UsageError("--trace-max-runtime needs --trace")
    if gpu_fraction is not None and trace is None:
        raise click.UsageError("--trace-gpu-fraction needs --trace")
    try:
        code = _simulate(
            scenario,
            trace,
            assign_tenants,
            seed,
            events_path,
            summary_path,
            until,
            overrides,
            max_runtime=max_runtime,
            gpu_fraction=gpu_fraction,
        )
    except InputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except BrokenPipeError:
        sys.exit(EXIT_FAILURE)
    except Exception as exc:  # the last line of defence: report, never a traceback
        click.echo(f"error: internal failure: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    sys.exit(code)


def _simulate(
    scenario_path: Path,
    trace_path: Path | None,
    assign_tenants: int | None,
    seed: int,
    events_path: str | None,
    summary_path: str | None,
    until: float | None,
    overrides: tuple[str, ...] = (),
    *,
    max_runtime: MaxRuntimeRule | None = None,
    gpu_fraction: GpuFractionRule | None = None,
) -> int:
    try:
        scenario = load_scenario(scenario_path)
    except InputError as exc:
        raise InputError(f"{scenario_path}: {exc}") from None
    if overrides:
        scenario = dataclasses.replace(
            scenario, policy=override_policy(scenario.policy, overrides, "--scheduler")
        )
    workloads = list(scenario.workloads)
    tenants_assigned = unmatched = trace_max_runtime = trace_gpu_fraction = None
    if trace_path is not None:
        namespaces = {ns for (ns, name) in scenario.config.local_queues if name == "default"}
        jobs = load_trace(
            trace_path,
            namespaces=namespaces,
            assign_tenants=assign_tenants,
            seed=seed,
            max_runtime=max_runtime or MaxRuntimeRule(),
            gpu_fraction=gpu_fraction or GpuFractionRule(),
        )
        trace_max_runtime, trace_gpu_fraction = jobs.max_runtime, jobs.gpu_fraction
        _warn_unoffered(jobs.gpu_fraction, scenario.config)
        workloads.extend(jobs.workloads)
        tenants_assigned, unmatched = jobs.tenants_assigned, jobs.unmatched
        if unmatched:
            listed = ", ".join(f"{t} ({n})" for t, n in sorted(unmatched.items()))
            click.echo(
                f"warning: {sum(unmatched.values())} trace jobs not simulated: their tenant has "
                f"no LocalQueue 'default': {listed}",
                err=True,
            )
    with ExitStack() as stack:
        emit = None
        if events_path is not None:
            emit = EventWriter(_open(stack, events_path))
        engine = Engine(scenario.config, workloads, emit=emit, policy=scenario.policy)
        result = engine.run(until=until)
    summary = summarize(
        result, scenario.config, tenants_assigned=tenants_assigned, unmatched_tenants=unmatched
    )
    if trace_max_runtime is not None:
        # Like tenants_assigned: limits a rule made up must never pass for trace data.
        summary["trace_max_runtime"] = trace_max_runtime
    if trace_gpu_fraction is not None:
        summary["trace_gpu_fraction"] = trace_gpu_fraction
    if summary_path is not None:
        with ExitStack() as stack:
            out = _open(stack, summary_path)
            json.dump(summary, out, indent=2)
            out.write("\n")
    else:
        # Keep stdout pure JSON lines when the events go there.
        print_table(summary, sys.stderr if events_path == "-" else sys.stdout)
    if result.invariant_violations:
        for message in result.invariant_violations[:10]:
            click.echo(f"invariant violated: {message}", err=True)
        click.echo(f"error: {len(result.invariant_violations)} invariant violations", err=True)
        return EXIT_FAILURE
    return 0


def _warn_unoffered(gpu_fraction: dict[str, object], config: Config) -> None:
    """Warn of shared-GPU resources that trace jobs ask and the scenario never offers.

    Such jobs are simulated as they are, and stay pending (reported inadmissible):
    most likely the rule does not match the scenario's cluster.
    """
    asked = gpu_fraction.get("resources")
    if not isinstance(asked, dict):
        return
    quotas = [fq for cq in config.cluster_queues.values() for fq in cq.flavors]
    quotas += [fq for cohort in config.cohorts.values() for fq in cohort.flavors]
    for resource, jobs in asked.items():
        missing = []
        if not any(fq.nominal.get(resource, 0) > 0 for fq in quotas):
            missing.append("no ClusterQueue or cohort has quota for it")
        if not any(
            n.schedulable and n.allocatable.get(resource, 0) > 0 for n in config.nodes.values()
        ):
            missing.append("no schedulable node offers it")
        if missing:
            click.echo(
                f"warning: {jobs} trace jobs ask for {resource} (--trace-gpu-fraction "
                f"{gpu_fraction['rule']}), but {' and '.join(missing)}: they will stay pending",
                err=True,
            )


def _open(stack: ExitStack, path: str) -> IO[str]:
    if path == "-":
        return sys.stdout
    try:
        return stack.enter_context(open(path, "w", encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc}") from None
