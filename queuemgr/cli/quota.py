"""``queuemgr quota set CQ --flavor F RES=Q ...``: change one flavor's quota, safely.

Why it exists: quota edits are the most frequent admin write and the most
argued about. Everything is validated before anything is written; lowering a
quota below what the queue already holds is allowed (people must be able to
take GPUs back) but never silent: the command warns and lists the admitted
workloads now over quota.

What must stay true: resources not named keep their quota (RES=0 sets zero;
``--remove`` drops resources); a lending limit never exceeds nominal and
limits need a cohort; the change and its audit rows, including the chosen
``--drain``/``--preempt`` policy for the over-quota workloads, commit in one
transaction. ``--preempt`` evicts the listed workloads in that transaction
(the service stops their pods and requeues them); ``--drain`` lets them
finish, and the scheduler admits nothing more until usage is under quota.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import click

from queuemgr.cli.common import database, quantities
from queuemgr.cli.errors import BadInput, handled, not_found
from queuemgr.cli.output import emit, output_option, vec
from queuemgr.core.model import ClusterQueueName, FlavorName, FlavorQuota, WorkloadId
from queuemgr.core.resources import ResourceName, parse_resource_name
from queuemgr.core.snapshot import admitted_requests
from queuemgr.store import admin, codec
from queuemgr.store.audit import os_actor
from queuemgr.store.config_objects import upsert_cluster_queue
from queuemgr.store.repository import load_state
from queuemgr.store.transitions import evict


@click.group("quota")
def quota() -> None:
    """Quota of a ClusterQueue per flavor and resource."""


@quota.command("set")
@click.argument("cluster_queue")
@click.argument("quantities_", metavar="RES=QTY...", nargs=-1)
@click.option("--flavor", required=True, help="The flavor whose quota changes.")
@click.option("--borrowing-limit", "borrowing", multiple=True, metavar="RES=QTY")
@click.option("--lending-limit", "lending", multiple=True, metavar="RES=QTY")
@click.option("--remove", "removed", multiple=True, metavar="RES", help="Drop a resource.")
@click.option(
    "--drain",
    "policy",
    flag_value="drain",
    help="Over-quota workloads finish; none is admitted above quota (service enforces).",
)
@click.option(
    "--preempt",
    "policy",
    flag_value="preempt",
    help="Over-quota workloads are evicted now; the service stops and requeues them.",
)
@output_option
@handled
def quota_set(
    cluster_queue: str,
    quantities_: tuple[str, ...],
    flavor: str,
    borrowing: tuple[str, ...],
    lending: tuple[str, ...],
    removed: tuple[str, ...],
    policy: str | None,
    output: str,
) -> None:
    """Set CLUSTER_QUEUE's quota on --flavor: nvidia.com/gpu=64 cpu=512 memory=4Ti.

    --preempt evicts the workloads now over quota (the service stops and requeues
    them); --drain lets them finish. Either is recorded in the audit log with the
    change; without either the over-quota workloads keep running.
    """
    nominal = quantities(quantities_, "RES=QTY")
    borrow = quantities(borrowing, "--borrowing-limit")
    lend = quantities(lending, "--lending-limit")
    drop = {parse_resource_name(r, field="--remove") for r in removed}
    if not (nominal or borrow or lend or drop):
        raise BadInput("RES=QTY: give at least one quantity (e.g. nvidia.com/gpu=8)")
    with database() as db:
        state = load_state(db)
        config = state.config
        cq = config.cluster_queues.get(ClusterQueueName(cluster_queue))
        if cq is None:
            raise not_found("cluster queue", cluster_queue, config.cluster_queues)
        if FlavorName(flavor) not in config.flavors:
            raise not_found("flavor", flavor, config.flavors)
        old = cq.quota(FlavorName(flavor)) or FlavorQuota(flavor=FlavorName(flavor), nominal={})
        new = _merged(old, nominal, borrow, lend, drop, has_cohort=cq.cohort is not None)
        flavors = tuple(new if q.flavor == flavor else q for q in cq.flavors)
        if cq.quota(FlavorName(flavor)) is None:
            flavors += (new,)
        updated = dataclasses.replace(cq, flavors=flavors)
        over = _over_quota(state, cluster_queue, flavor, new)
        with db.write() as conn:
            # A concurrent change between the read and this write is still audited
            # with its own before/after: the upsert re-reads the row under a lock.
            changed = upsert_cluster_queue(
                conn, updated, actor=os_actor(), stopped=cq.name in state.stopped
            )
            if changed and (over or policy):
                admin.record(
                    conn,
                    actor=os_actor(),
                    action="quota-lowered" if over else "quota-policy",
                    kind="ClusterQueue",
                    name=cluster_queue,
                    after={"flavor": flavor, "policy": policy or "none", "over_quota": over},
                )
            preempted: list[str] = []
            if changed and policy == "preempt":
                for o in over:  # evicted with the change; the service stops and requeues them
                    evict(
                        conn,
                        WorkloadId(o["workload"]),
                        now=time.time(),
                        reason="QuotaLowered",
                        message=f"quota of {cluster_queue} on {flavor} lowered by {os_actor()}",
                    )
                    preempted.append(o["workload"])
    doc = {
        "cluster_queue": cluster_queue,
        "flavor": flavor,
        "changed": changed,
        "before": codec.quota_json(old),
        "after": codec.quota_json(new),
        "policy": policy,
        "over_quota": over,
        "preempted": preempted,
    }
    emit(doc, output, _print)


def _merged(
    old: FlavorQuota,
    nominal: dict[ResourceName, int],
    borrow: dict[ResourceName, int],
    lend: dict[ResourceName, int],
    drop: set[ResourceName],
    *,
    has_cohort: bool,
) -> FlavorQuota:
    n = {r: v for r, v in {**old.nominal, **nominal}.items() if r not in drop}
    b = {r: v for r, v in {**old.borrowing_limit, **borrow}.items() if r not in drop}
    lim = {r: v for r, v in {**old.lending_limit, **lend}.items() if r not in drop}
    for arg, limits in (("--borrowing-limit", borrow), ("--lending-limit", lend)):
        if limits and not has_cohort:
            raise BadInput(f"{arg}: only a queue in a cohort can have one")
        for r in limits:
            if r not in n:
                raise BadInput(f"{arg} {r}: {r} has no nominal quota on {old.flavor}")
    for r, v in lim.items():
        if v > n.get(r, 0):
            raise BadInput(f"--lending-limit {r}: lending limit {v} exceeds nominal {n.get(r, 0)}")
    return FlavorQuota(flavor=old.flavor, nominal=n, borrowing_limit=b, lending_limit=lim)


def _over_quota(state: Any, cq: str, flavor: str, new: FlavorQuota) -> list[dict[str, Any]]:
    """Admitted workloads beyond the new nominal quota, last admitted first to go.

    The ones that keep their place are the higher-priority, earlier-admitted
    ones (what the scheduler would have kept); the rest are listed.
    """
    running = [
        a
        for a in state.admitted
        if a.admission.cluster_queue == cq and a.admission.flavor == flavor
    ]
    running.sort(key=lambda a: (-a.workload.priority, a.admitted_at, a.workload.id))
    held: dict[str, int] = {}
    over: list[dict[str, Any]] = []
    for a in running:
        req = admitted_requests(a)
        for r, v in req.items():
            held[r] = held.get(r, 0) + v
        exceeded = sorted(r for r, v in req.items() if v and held[r] > new.nominal.get(r, 0))
        if exceeded:
            over.append(
                {"workload": a.workload.id, "requests": codec.vector(req), "exceeds": exceeded}
            )
    return over


def _print(doc: dict[str, Any]) -> None:
    before, after = doc["before"], doc["after"]
    state = "set" if doc["changed"] else "unchanged"
    click.echo(
        f"quota of {doc['cluster_queue']} on {doc['flavor']} {state}: "
        f"nominal {vec(before['nominal'])} -> {vec(after['nominal'])}"
    )
    if doc["over_quota"]:
        click.echo(
            f"warning: the new quota is below current usage; {len(doc['over_quota'])} admitted "
            f"workloads are now over quota (policy: {doc['policy'] or 'none, they keep running'}):",
            err=True,
        )
        for w in doc["over_quota"]:
            click.echo(
                f"  {w['workload']}  {vec(w['requests'])}  over on {', '.join(w['exceeds'])}",
                err=True,
            )
    if doc["preempted"]:
        click.echo(
            f"preempted {len(doc['preempted'])} workloads: the service stops and requeues them",
            err=True,
        )
