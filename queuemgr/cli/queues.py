"""``queuemgr cq|lq|cohort|flavor ...`` and ``queuemgr queues``: imperative queue admin.

Why it exists: ``apply`` is for GitOps; these are for the quick fix at 3 am
and for looking around. They write through the same store upserts, so every
change is audited in its own transaction exactly like an apply.

What must stay true: flags are validated before the database is touched
(errors name the flag, exit 2); an unknown object exits 1 and suggests the
nearest names; ``edit`` changes only what its flags name; ``delete`` refuses
objects still in use (a flavor with quota, a cohort with members, a queue with
admitted workloads) and says by what.
"""

from __future__ import annotations

from typing import Any

import click

from queuemgr.cli import flags
from queuemgr.cli.common import database, namespace_option
from queuemgr.cli.errors import CliError, handled, not_found
from queuemgr.cli.output import duration, emit, output_option, print_fields, print_table, vec
from queuemgr.cli.views import cq_doc, load_view, lq_doc, nominal_total
from queuemgr.core.model import ClusterQueueName, LocalQueue
from queuemgr.store import admin
from queuemgr.store.audit import os_actor
from queuemgr.store.config_objects import (
    load_config,
    upsert_cluster_queue,
    upsert_local_queue,
)


@click.group("cq")
def cq() -> None:
    """ClusterQueues: quota per flavor, cohort, fair-share weight, preemption."""


def _cq_flags(f: Any) -> Any:
    for opt in reversed(flags.CQ_OPTIONS):
        f = opt(f)
    return f


@cq.command("create")
@click.argument("name")
@_cq_flags
@handled
def cq_create(name: str, **given: Any) -> None:
    """Create ClusterQueue NAME (quotas: --nominal here or `queuemgr quota set`)."""
    new = flags.cluster_queue_from_flags(None, name, given)
    with database() as db, db.write() as conn:
        config, _ = load_config(conn)
        if new.name in config.cluster_queues:
            raise CliError(f"cluster queue {name!r} already exists (use `queuemgr cq edit`)")
        flags.check_flavors(new, config)
        upsert_cluster_queue(conn, new, actor=os_actor())
    click.echo(f"clusterqueue {name} created")


@cq.command("edit")
@click.argument("name")
@_cq_flags
@handled
def cq_edit(name: str, **given: Any) -> None:
    """Change the fields of ClusterQueue NAME that the flags name."""
    with database() as db, db.write() as conn:
        config, stopped = load_config(conn)
        old = config.cluster_queues.get(ClusterQueueName(name))
        if old is None:
            raise not_found("cluster queue", name, config.cluster_queues)
        new = flags.cluster_queue_from_flags(old, name, given)
        flags.check_flavors(new, config)
        changed = upsert_cluster_queue(conn, new, actor=os_actor(), stopped=name in stopped)
    click.echo(f"clusterqueue {name} {'edited' if changed else 'unchanged'}")


def _set_stopped(name: str, stop: bool) -> bool:
    with database() as db, db.write() as conn:
        config, _ = load_config(conn)
        old = config.cluster_queues.get(ClusterQueueName(name))
        if old is None:
            raise not_found("cluster queue", name, config.cluster_queues)
        changed = upsert_cluster_queue(conn, old, actor=os_actor(), stopped=stop)
        return changed


@cq.command("stop")
@click.argument("name")
@handled
def cq_stop(name: str) -> None:
    """Stop admitting from NAME; admitted workloads keep running and holding quota."""
    _set_stopped(name, True)
    click.echo(f"clusterqueue {name} stopped")


@cq.command("resume")
@click.argument("name")
@handled
def cq_resume(name: str) -> None:
    """Resume admitting from NAME."""
    _set_stopped(name, False)
    click.echo(f"clusterqueue {name} resumed")


@cq.command("delete")
@click.argument("name")
@handled
def cq_delete(name: str) -> None:
    """Delete ClusterQueue NAME (refused while it has admitted workloads)."""
    with database() as db, db.write() as conn:
        if not admin.delete_cluster_queue(conn, name, actor=os_actor()):
            raise not_found("cluster queue", name, load_config(conn)[0].cluster_queues)
    click.echo(f"clusterqueue {name} deleted")


@cq.command("list")
@output_option
@handled
def cq_list(output: str) -> None:
    """ClusterQueues with quota, usage and depth."""
    with database() as db:
        view = load_view(db)
    docs = [cq_doc(view, q) for _, q in sorted(view.state.config.cluster_queues.items())]
    emit({"cluster_queues": docs}, output, _cq_table)


def _cq_table(doc: dict[str, Any]) -> None:
    rows = [
        (
            d["name"],
            d["cohort_path"] or "-",
            vec(nominal_total(d)),
            vec(d["usage"]),
            d["pending"],
            d["admitted"],
            "stopped" if d["stopped"] else "active",
        )
        for d in doc["cluster_queues"]
    ]
    cols = ("NAME", "COHORT", "QUOTA", "USAGE", "PENDING", "ADMITTED", "STATUS")
    print_table(None, cols, rows)


@cq.command("describe")
@click.argument("name")
@output_option
@handled
def cq_describe(name: str, output: str) -> None:
    """Everything about ClusterQueue NAME: quotas and usage per flavor, queues feeding it."""
    with database() as db:
        view = load_view(db)
    q = view.state.config.cluster_queues.get(ClusterQueueName(name))
    if q is None:
        raise not_found("cluster queue", name, view.state.config.cluster_queues)
    emit(cq_doc(view, q), output, _cq_describe)


def _cq_describe(d: dict[str, Any]) -> None:
    print_fields(
        [
            ("Name", d["name"]),
            ("Cohort", d["cohort_path"] or "-"),
            ("Weight", d["weight"]),
            ("Queueing strategy", d["queueing_strategy"]),
            ("Ordering", d.get("ordering") or "inherited"),
            ("Namespaces", ", ".join(d["namespaces"]) if d["namespaces"] is not None else "any"),
            (
                "Preemption",
                f"within={d['within_cluster_queue']} reclaim={d['reclaim_within_cohort']}"
                + (
                    f" min-runtime={duration(d['preemption_min_runtime'])}"
                    if d.get("preemption_min_runtime")
                    else ""
                ),
            ),
            (
                "Borrows for",
                "any workload"
                if d.get("borrowing_max_runtime") is None
                else f"max_runtime <= {duration(d['borrowing_max_runtime'])}",
            ),
            ("Resource weights", _weights_text(d.get("resource_weights") or [])),
            ("Admission checks", ", ".join(d.get("admission_checks") or []) or "none"),
            ("Status", "stopped" if d["stopped"] else "active"),
            ("Pending", d["pending"]),
            ("Admitted", d["admitted"]),
            ("Local queues", ", ".join(d["local_queues"]) or "-"),
        ]
    )
    rows = [
        (
            f["flavor"],
            vec(f["nominal"]),
            vec(f["usage"]),
            vec(f["borrowing_limit"]),
            vec(f["lending_limit"]),
        )
        for f in d["flavors"]
    ]
    print_table(None, ("FLAVOR", "NOMINAL", "USAGE", "BORROWING LIMIT", "LENDING LIMIT"), rows)


@click.group("lq")
def lq() -> None:
    """LocalQueues: what tenants submit to, one per namespace and name."""


@lq.command("create")
@click.argument("name")
@namespace_option
@click.option(
    "--cluster-queue", "-c", "cluster_queue", required=True, help="The ClusterQueue it feeds."
)
@handled
def lq_create(name: str, namespace: str | None, cluster_queue: str) -> None:
    """Create LocalQueue NAME in a namespace, feeding a ClusterQueue."""
    ns = flags.namespace(namespace)
    flags.check_name(name, "NAME")
    with database() as db, db.write() as conn:
        config, _ = load_config(conn)
        if (ns, name) in config.local_queues:
            raise CliError(f"local queue {ns}/{name} already exists")
        if cluster_queue not in config.cluster_queues:
            raise not_found("cluster queue", cluster_queue, config.cluster_queues)
        new = LocalQueue(namespace=ns, name=name, cluster_queue=ClusterQueueName(cluster_queue))
        upsert_local_queue(conn, new, actor=os_actor())
    click.echo(f"localqueue {ns}/{name} created")


@lq.command("delete")
@click.argument("name")
@namespace_option
@handled
def lq_delete(name: str, namespace: str | None) -> None:
    """Delete LocalQueue NAME (its pending workloads become unroutable)."""
    ns = flags.namespace(namespace)
    with database() as db, db.write() as conn:
        if not admin.delete_local_queue(conn, ns, name, actor=os_actor()):
            names = [n for (s, n) in admin.local_queue_names(conn, ns)]
            raise not_found(f"local queue in namespace {ns!r}:", name, names)
    click.echo(f"localqueue {ns}/{name} deleted")


@lq.command("list")
@namespace_option
@click.option("-A", "--all-namespaces", is_flag=True, help="LocalQueues of every namespace.")
@output_option
@handled
def lq_list(namespace: str | None, all_namespaces: bool, output: str) -> None:
    """LocalQueues with their ClusterQueue, depth and the queue's quota and usage."""
    ns = None if all_namespaces else flags.namespace(namespace)
    with database() as db:
        view = load_view(db)
    lqs = sorted(view.state.config.local_queues.values(), key=lambda q: q.key)
    docs = [lq_doc(view, q) for q in lqs if ns is None or q.namespace == ns]
    emit({"local_queues": docs}, output, _lq_table)


def _lq_table(doc: dict[str, Any]) -> None:
    rows = [
        (
            d["namespace"],
            d["name"],
            d["cluster_queue"] + ("" if d["cluster_queue_exists"] else " (missing)"),
            d.get("cohort") or "-",
            d["pending"],
            d["admitted"],
            vec(nominal_total({"flavors": [{"nominal": v} for v in d.get("quota", {}).values()]})),
            vec(d.get("usage", {})),
        )
        for d in doc["local_queues"]
    ]
    cols = (
        "NAMESPACE", "NAME", "CLUSTERQUEUE", "COHORT", "PENDING", "ADMITTED", "CQ QUOTA",
        "CQ USAGE",
    )  # fmt: skip
    print_table(None, cols, rows)


@lq.command("describe")
@click.argument("name")
@namespace_option
@output_option
@handled
def lq_describe(name: str, namespace: str | None, output: str) -> None:
    """LocalQueue NAME: its ClusterQueue, depth, quota and usage."""
    ns = flags.namespace(namespace)
    with database() as db:
        view = load_view(db)
    q = view.state.config.local_queues.get((ns, name))
    if q is None:
        names = [n for (s, n) in view.state.config.local_queues if s == ns]
        raise not_found(f"local queue in namespace {ns!r}:", name, names)
    emit(lq_doc(view, q), output, lambda d: print_fields([(k, v) for k, v in d.items()]))


@click.command("queues")
@namespace_option
@click.option("-A", "--all-namespaces", is_flag=True, help="Queues of every namespace.")
@output_option
@click.pass_context
def queues(ctx: click.Context, namespace: str | None, all_namespaces: bool, output: str) -> None:
    """The LocalQueues you can submit to, with quota, usage and depth."""
    ctx.invoke(lq_list, namespace=namespace, all_namespaces=all_namespaces, output=output)


def _weights_text(weights: list[dict[str, Any]]) -> str:
    """``nvidia.com/mig-1g.10gb = 1/7 nvidia.com/gpu, ...`` (fair sharing only), or none."""
    if not weights:
        return "none"
    return ", ".join(
        f"{w['resource']} = {w['numerator']}/{w['denominator']} {w['counts_as']}" for w in weights
    )
