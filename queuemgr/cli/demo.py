"""``queuemgr demo``: the real service on a simulated four-node cluster, watched live.

Why it exists: it is the first command to run on a fresh machine. It needs
nothing but the package: :mod:`queuemgr.demo.demo_database` prepares a
database, :mod:`queuemgr.demo.run` runs the service and submits a seeded
burst; this module only parses the options, draws what the database shows (a
``rich`` live view, or one line per event when stdout is not a terminal) and
prints the summary.

What must stay true: bad options exit 2 naming the option and the value; a
database or migration failure exits 1 with one line on stderr; never a
traceback. Ctrl-C or SIGTERM stops the service and still prints the summary
(exit 130). A run that does not finish in time, or a node seen holding more
GPUs than it has, exits 1. The last lines say how to explore the demo's
database with the CLI, and those commands work as printed.
"""

from __future__ import annotations

import json
import logging
import shlex
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import click
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.logging import RichHandler
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from queuemgr.cli.errors import BadInput, CliError, handled
from queuemgr.cli.output import print_table
from queuemgr.demo.burst import MIN_JOBS
from queuemgr.demo.demo_database import DemoDatabase, DemoError, prepare_database
from queuemgr.demo.demo_figures import Event, Frame, QueueLine, Summary
from queuemgr.demo.run import Demo
from queuemgr.store.embedded import EmbeddedPostgresError
from queuemgr.store.migrate import MigrationError

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report an interrupted command
STATUS_EVERY = 5.0  # seconds between two queue lines in plain mode
FEED_LINES = 15  # at most; fewer when the terminal is short
PALETTE = ("cyan", "green", "magenta", "yellow", "blue", "red")
EVENT_STYLE = {
    "submitted": "dim",
    "admitted": "green",
    "preempted": "bold red",
    "finished": "dim blue",
}


@click.command("demo")
@click.option(
    "--jobs",
    type=click.IntRange(min=MIN_JOBS, max=1000),
    default=40,
    show_default=True,
    help="Workloads in the burst (more jobs arrive over a longer window).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the burst's mix.")
@click.option(
    "--speed",
    type=click.FloatRange(min=0.1, max=10.0),
    default=1.0,
    show_default=True,
    help="Time runs this many times faster: 2 halves every arrival time and runtime.",
)
@click.option(
    "--plain",
    is_flag=True,
    help="One line per event instead of the live view (the default when stdout is not a terminal).",
)
@click.option(
    "--summary",
    "summary_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the summary as JSON to this file.",
)
@handled
def demo(jobs: int, seed: int, speed: float, plain: bool, summary_path: Path | None) -> None:
    """Run the scheduler service on a simulated 4-node, 8-GPU-per-node cluster shared by
    three tenants, submit a burst of jobs and gangs, and watch borrowing and preemption live.

    Uses its own database (the embedded Postgres's demo directory, or an empty
    QUEUEMGR_DATABASE_URL), left behind for `queuemgr list`, `why` and `audit`.
    """
    summary_file = _open_summary(summary_path)
    stop = threading.Event()
    with _signals_stop(stop), _closing(summary_file):
        code = _demo(jobs, seed, speed, plain, summary_file, stop)
    sys.exit(code)


def _open_summary(path: Path | None) -> IO[str] | None:
    if path is None:
        return None
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"--summary: cannot write {str(path)!r}: {exc.strerror}") from None


@contextmanager
def _closing(f: IO[str] | None) -> Iterator[None]:
    try:
        yield
    finally:
        if f is not None:
            f.close()


@contextmanager
def _signals_stop(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C and SIGTERM set ``stop`` (the run ends at its next tick) instead of raising."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, lambda signum, frame: stop.set())
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _demo(
    jobs: int,
    seed: int,
    speed: float,
    plain: bool,
    summary_file: IO[str] | None,
    stop: threading.Event,
) -> int:
    live = not plain and sys.stdout.isatty()
    click.echo("queuemgr demo: preparing its database ...", err=True)
    try:
        database = prepare_database()
        run = Demo(database, jobs=jobs, seed=seed, speed=speed)
    except DemoError as exc:
        raise CliError(str(exc)) from None
    except MigrationError as exc:
        raise CliError(f"cannot migrate the demo database: {exc}") from None
    except EmbeddedPostgresError as exc:
        raise CliError(f"cannot start the embedded Postgres: {exc}") from None
    outcome = "interrupted"
    try:
        if not stop.is_set():
            run.start()
            outcome = _run_live(run, stop) if live else _run_plain(run, stop)
        run.stop()
        summary = run.summary(outcome)
    finally:
        run.close()
    _print_summary(summary, run, database)
    if summary_file is not None:
        json.dump(summary.doc(), summary_file, indent=2)
        summary_file.write("\n")
    return _exit_code(summary, run)


def _exit_code(summary: Summary, run: Demo) -> int:
    if summary.node_violations:
        for message in summary.node_violations[:10]:
            click.echo(f"invariant violated: {message}", err=True)
        click.echo(f"error: {len(summary.node_violations)} node capacity violations", err=True)
        return 1
    if summary.outcome == "timed out":
        click.echo(
            f"error: the demo did not finish within {run.timeout():.0f}s: "
            f"{summary.planned - summary.finished} of {summary.planned} workloads unfinished",
            err=True,
        )
        return 1
    if summary.outcome == "interrupted":
        return EXIT_INTERRUPTED
    return 0


def _intro(run: Demo, database: DemoDatabase) -> list[str]:
    cfg = run.config
    cqs = ", ".join(sorted(cfg.cluster_queues))
    cohorts = ", ".join(sorted(cfg.cohorts)) or "none"
    return [
        f"queuemgr demo: {len(run.plan)} workloads (seed {run.seed}, speed {run.speed:g}x) on "
        f"{len(cfg.nodes)} nodes with {run.gpu_capacity} GPUs; ClusterQueues {cqs} "
        f"share cohort {cohorts}",
        f"database: {database.description}",
        f"metrics:  {run.metrics_url}",
    ]


# -- plain mode --------------------------------------------------------------------------


def _event_line(e: Event) -> str:
    text = f"{e.at:7.1f}s  {e.kind:<9}  {e.workload:<20} {e.gpus:>2} GPUs"
    return f"{text}  {e.detail}" if e.detail else text


def _queue_summary(q: QueueLine) -> str:
    borrowed = f" (+{q.borrowed} borrowed)" if q.borrowed else ""
    return f"{q.cluster_queue} {q.used}/{q.nominal} GPUs{borrowed}, {q.pending} pending"


def _run_plain(run: Demo, stop: threading.Event) -> str:
    for line in _intro(run, run.database):
        click.echo(line)
    next_status = [0.0]

    def on_frame(frame: Frame) -> None:
        for e in frame.events:
            click.echo(_event_line(e))
        if frame.elapsed >= next_status[0] or frame.done:
            queues = " | ".join(_queue_summary(q) for q in frame.queues)
            click.echo(f"{frame.elapsed:7.1f}s  queues     {queues}")
            next_status[0] = frame.elapsed + STATUS_EVERY

    return run.run(on_frame, stop)


# -- live mode -------------------------------------------------------------------------


def _colours(run: Demo) -> dict[str, str]:
    namespaces = sorted({ns for ns, _ in run.config.local_queues})
    return {ns: PALETTE[i % len(PALETTE)] for i, ns in enumerate(namespaces)}


def _queue_bar(q: QueueLine, capacity: int, colour: str) -> Text:
    bar = Text()
    within = min(q.used, q.nominal)
    bar.append("█" * within, style=colour)
    bar.append("▓" * (q.used - within), style=f"bold {colour}")
    bar.append("░" * max(0, q.nominal - q.used), style="dim")
    bar.append(" " * max(0, capacity - max(q.used, q.nominal)))
    return bar


def _render(
    frame: Frame,
    feed: Sequence[Event],
    run: Demo,
    colours: dict[str, str],
    intro: list[str],
    height: int,
) -> RenderableType:
    """One screen that fits 80 columns; the feed gets the rows the rest leaves of ``height``."""
    routes: dict[str, str] = {
        lq.cluster_queue: ns for (ns, _), lq in run.config.local_queues.items()
    }
    queues = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    queues.add_column("QUEUE", no_wrap=True)
    for column in ("WAIT", "RUN", "DONE", "GPUS", "BORROW"):
        queues.add_column(column, justify="right", no_wrap=True)
    queues.add_column(f"GPUS HELD / NOMINAL (of {run.gpu_capacity})", no_wrap=True)
    reasons = Text("  pending:", style="dim")
    for q in frame.queues:
        colour = colours.get(routes.get(q.cluster_queue, ""), "white")
        queues.add_row(
            Text(q.cluster_queue, style=colour),
            str(q.pending),
            str(q.running),
            str(q.finished),
            f"{q.used}/{q.nominal}",
            f"+{q.borrowed}" if q.borrowed else "-",
            _queue_bar(q, run.gpu_capacity, colour),
        )
        if q.reasons:
            ranked = sorted(q.reasons.items(), key=lambda x: (-x[1], x[0]))
            if len(reasons) > len("  pending:"):
                reasons.append(" ·", style="dim")
            reasons.append(f" {q.cluster_queue} ", style=colour)
            reasons.append(", ".join(f"{reason} {n}" for reason, n in ranked), style="dim")
    if len(reasons) == len("  pending:"):
        reasons.append(" none", style="dim")
    nodes = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    nodes.add_column("NODE", no_wrap=True)
    nodes.add_column("GPUS BY TEAM", no_wrap=True)
    nodes.add_column("USED", justify="right", no_wrap=True)
    for n in frame.nodes:
        cells = Text()
        for ns, gpus in sorted(n.held.items()):
            cells.append("█" * gpus, style=colours.get(ns, "white"))
        cells.append("·" * max(0, n.capacity - n.used), style="dim")
        used_style = "bold red" if n.used > n.capacity else ""
        nodes.add_row(n.name, cells, Text(f"{n.used}/{n.capacity}", style=used_style))
    # Everything but the feed takes about 18 rows (one more when the reasons wrap).
    rows = max(3, min(FEED_LINES, height - 19 - len(intro) + 2))
    lines = [
        Text(_event_line(e), style=EVENT_STYLE.get(e.kind, ""), no_wrap=True, overflow="ellipsis")
        for e in list(feed)[-rows:]
    ]
    feed_panel = Panel(
        Group(*lines),
        title="admissions, preemptions, finishes (read from the database)",
        title_align="left",
        height=rows + 2,
    )
    legend = Text("  ")
    for ns, colour in colours.items():
        legend.append(f"█ {ns} ", style=colour)
    legend.append(" ▓ borrowed  ░ idle, lent to others", style="dim")
    status = Text(
        f"t={frame.elapsed:.1f}s  submitted {frame.submitted}/{frame.planned}  "
        f"finished {frame.finished}/{frame.planned}  admissions {frame.admissions}  "
        f"preemptions {frame.preemptions}" + ("" if frame.leader else "  (electing a leader)"),
        style="bold",
    )
    return Group(
        Text("\n".join(intro), style="dim"),
        status,
        queues,
        reasons,
        legend,
        nodes,
        feed_panel,
    )


def _run_live(run: Demo, stop: threading.Event) -> str:
    console = Console()
    colours = _colours(run)
    intro = [
        f"queuemgr demo: {len(run.plan)} workloads, seed {run.seed}, speed {run.speed:g}x, "
        f"{len(run.config.nodes)} nodes with {run.gpu_capacity} GPUs",
        f"metrics {run.metrics_url}   Ctrl-C stops and prints the summary",
    ]
    feed: deque[Event] = deque(maxlen=FEED_LINES)
    handler = RichHandler(console=console, show_path=False, level=logging.WARNING)
    logger = logging.getLogger("queuemgr")
    logger.addHandler(handler)
    try:
        with Live(console=console, auto_refresh=False, transient=False) as live:

            def on_frame(frame: Frame) -> None:
                feed.extend(e for e in frame.events if e.kind != "submitted")
                view = _render(frame, feed, run, colours, intro, console.size.height)
                live.update(view, refresh=True)

            return run.run(on_frame, stop)
    finally:
        logger.removeHandler(handler)


# -- the summary -------------------------------------------------------------------------


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def _percent(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _print_summary(s: Summary, run: Demo, database: DemoDatabase) -> None:
    ended = {
        "finished": "finished",
        "interrupted": "was interrupted",
        "timed out": "timed out",
    }[s.outcome]
    by = ", ".join(f"{cq} {n}" for cq, n in s.preemptions_by.items())
    click.echo("")
    click.echo(
        f"queuemgr demo {ended} after {s.elapsed_s:.1f}s (seed {s.seed}, speed {s.speed:g}x)"
    )
    click.echo(f"  workloads    {s.submitted} of {s.planned} submitted, {s.finished} finished")
    click.echo(f"  admitted     {s.admitted} workloads, {s.admissions} admissions")
    click.echo(f"  preempted    {s.preemptions}" + (f" (by {by})" if by else ""))
    if s.preemptions:
        click.echo(
            f"               at most {s.max_preemptions_per_workload} of one workload, "
            f"{s.wasted_preemptions} wasted, {s.lost_gpu_seconds:.0f} GPU-seconds lost"
        )
    until = "last finish" if s.finished == s.submitted else "now"
    click.echo(
        f"  GPUs         {_percent(s.gpu_utilization)} of {s.gpu_capacity} used by finished runs "
        f"over {s.span_s:.1f}s (first submission to {until})"
    )
    click.echo(f"               {_percent(s.gpu_busy)} held on average, preempted runs included")
    click.echo("")
    print_table(
        None,
        ["TENANT", "SUBMITTED", "ADMITTED", "FINISHED", "WAIT P50", "WAIT P95", "GPU-SECONDS"],
        [
            [
                name,
                t.submitted,
                t.admitted,
                t.finished,
                _seconds(t.wait_p50_s),
                _seconds(t.wait_p95_s),
                f"{t.gpu_seconds:.0f}",
            ]
            for name, t in s.tenants.items()
        ],
    )
    click.echo("")
    click.echo("Explore the demo's database with the CLI (the next demo run replaces it):")
    if database.explore is None:
        click.echo("  # QUEUEMGR_DATABASE_URL already points at it")
    else:
        var, value = database.explore
        click.echo(f"  export {var}={shlex.quote(value)}")
    # `why` says most about a workload still waiting, else about one that was preempted.
    examples = [*run.waiting, *run.preempted, *(p.id for p in run.plan)]
    example = examples[0] if examples else None
    commands = ["queuemgr queues -A", "queuemgr list -A --all"]
    if example is not None:
        ns, _, name = example.partition("/")
        commands.append(f"queuemgr why {name} -n {ns}")
    commands.append("queuemgr audit")
    for c in commands:
        click.echo(f"  {c}")
