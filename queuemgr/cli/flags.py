"""Flags shared by several commands: names, namespaces and the ClusterQueue flags.

Why it exists: ``cq create`` and ``cq edit`` must validate their flags
identically, and names typed on the command line must follow the same rules
as names in a scenario or apply file; the simulator's readers do the checking.

What must stay true: every flag is checked before the database is touched, and
an error message starts with the flag (``--weight: ...``), exit 2.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from queuemgr.cli.common import default_namespace, quantities
from queuemgr.cli.errors import BadInput, not_found
from queuemgr.core.model import (
    ClusterQueue,
    ClusterQueueName,
    CohortName,
    FlavorName,
    FlavorQuota,
    Ordering,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    WithinClusterQueue,
)
from queuemgr.core.names import NameRule
from queuemgr.core.snapshot import Config
from queuemgr.core.values import shown
from queuemgr.core.weights import ResourceWeight
from queuemgr.spec import checks as y
from queuemgr.spec.checks import InputError
from queuemgr.spec.knobs import parse_duration
from queuemgr.spec.objects import (
    check_resource_weights,
    parse_admission_checks,
    resource_weight_of_text,
)


def namespace(ns: str | None) -> str:
    out = default_namespace(ns)
    check_name(out, "--namespace")
    return out


def check_name(value: str, arg: str, rule: NameRule = NameRule.LABEL) -> str:
    return y.name(value, arg, rule)


SUBDOMAIN = NameRule.SUBDOMAIN  # workloads, flavors and nodes; the rest are labels


INHERIT = "inherit"  # --ordering: no ordering of the queue's own

CQ_OPTIONS = [
    click.option("--cohort", help="Cohort to join (created when missing).", default=None),
    click.option("--no-cohort", is_flag=True, help="edit: leave the cohort."),
    click.option("--weight", default=None, help="Fair-share weight: decimal or p/q."),
    click.option(
        "--queueing-strategy", default=None, type=click.Choice([s.value for s in QueueingStrategy])
    ),
    click.option(
        "--namespace", "namespaces", multiple=True, help="Admit only this namespace (repeatable)."
    ),
    click.option("--any-namespace", is_flag=True, help="edit: admit every namespace."),
    click.option(
        "--within-cluster-queue",
        default=None,
        type=click.Choice([p.value for p in WithinClusterQueue]),
    ),
    click.option(
        "--reclaim-within-cohort",
        default=None,
        type=click.Choice([p.value for p in ReclaimWithinCohort]),
    ),
    click.option(
        "--min-runtime",
        default=None,
        metavar="DURATION",
        help="Seconds (or 90m, 2h, 0 for none) a run is safe from reclaim and fair sharing.",
    ),
    click.option(
        "--borrowing-max-runtime",
        default=None,
        metavar="DURATION",
        help="Borrow only for workloads declaring a max_runtime of at most this "
        "(3d, 12h...; none: any workload borrows).",
    ),
    click.option(
        "--ordering",
        default=None,
        type=click.Choice([*(o.value for o in Ordering), INHERIT]),
        help="Order within the queue; inherit: the cohort's, else the scheduler's.",
    ),
    click.option(
        "--resource-weight",
        "resource_weights",
        multiple=True,
        metavar="RES=N/D[:TARGET]",
        help="In fair sharing, one RES counts as N/D of TARGET (default nvidia.com/gpu), "
        "e.g. nvidia.com/mig-1g.10gb=1/7 (repeatable; replaces the queue's weights).",
    ),
    click.option(
        "--clear-resource-weights", is_flag=True, help="edit: count every resource on its own."
    ),
    click.option(
        "--admission-check",
        "admission_checks",
        multiple=True,
        metavar="NAME",
        help="Start admitted jobs only once this check is Ready, e.g. provisioning-request "
        "(repeatable, in order; replaces the queue's checks; a check of serve's "
        "kubernetes.admission_checks).",
    ),
    click.option("--clear-admission-checks", is_flag=True, help="edit: start jobs at admission."),
    click.option(
        "--nominal",
        "nominals",
        multiple=True,
        metavar="FLAVOR:RES=Q[,RES=Q]",
        help="Nominal quota of one flavor (repeatable, in preference order).",
    ),
]


def cluster_queue_from_flags(
    old: ClusterQueue | None, name: str, f: dict[str, Any]
) -> ClusterQueue:
    """``old`` with the flags applied (a new queue when ``old`` is None)."""
    check_name(name, "NAME")
    cq = old or ClusterQueue(name=ClusterQueueName(name), flavors=())
    changes: dict[str, Any] = {}
    if f["cohort"] is not None and f["no_cohort"]:
        raise BadInput("--cohort: cannot be combined with --no-cohort")
    if f["cohort"] is not None:
        changes["cohort"] = CohortName(check_name(f["cohort"], "--cohort"))
    if f["no_cohort"]:
        changes["cohort"] = None
    if f["weight"] is not None:
        changes["weight"] = y.fraction(number(f["weight"]), "--weight")
    if f["queueing_strategy"] is not None:
        changes["queueing_strategy"] = QueueingStrategy(f["queueing_strategy"])
    if f["namespaces"]:
        changes["namespaces"] = frozenset(check_name(n, "--namespace") for n in f["namespaces"])
    if f["any_namespace"]:
        changes["namespaces"] = None
    if f["within_cluster_queue"] or f["reclaim_within_cohort"] or f["min_runtime"] is not None:
        p = cq.preemption
        changes["preemption"] = PreemptionPolicy(
            within_cluster_queue=WithinClusterQueue(
                f["within_cluster_queue"] or p.within_cluster_queue.value
            ),
            reclaim_within_cohort=ReclaimWithinCohort(
                f["reclaim_within_cohort"] or p.reclaim_within_cohort.value
            ),
            min_runtime=p.min_runtime if f["min_runtime"] is None else _duration(f["min_runtime"]),
        )
    if f["borrowing_max_runtime"] is not None:
        raw = f["borrowing_max_runtime"]
        changes["borrowing_max_runtime"] = (
            None if raw == "none" else _duration(raw, "--borrowing-max-runtime", zero=False)
        )
    if f["ordering"] is not None:
        changes["ordering"] = None if f["ordering"] == INHERIT else Ordering(f["ordering"])
    if f["resource_weights"] and f["clear_resource_weights"]:
        raise BadInput("--resource-weight: cannot be combined with --clear-resource-weights")
    if f["resource_weights"]:
        changes["resource_weights"] = _resource_weights(f["resource_weights"])
    if f["clear_resource_weights"]:
        changes["resource_weights"] = ()
    if f["admission_checks"] and f["clear_admission_checks"]:
        raise BadInput("--admission-check: cannot be combined with --clear-admission-checks")
    if f["admission_checks"]:
        try:
            changes["admission_checks"] = parse_admission_checks(
                list(f["admission_checks"]), "--admission-check"
            )
        except InputError as exc:
            raise BadInput(str(exc)) from None
    if f["clear_admission_checks"]:
        changes["admission_checks"] = ()
    if f["nominals"]:
        changes["flavors"] = tuple(_nominal(n) for n in f["nominals"])
    new = dataclasses.replace(cq, **changes)
    if new.cohort is None and any(q.borrowing_limit or q.lending_limit for q in new.flavors):
        raise BadInput("--no-cohort: the queue has borrowing or lending limits; remove them first")
    return new


def _duration(raw: str, option: str = "--min-runtime", *, zero: bool = True) -> float:
    try:
        return parse_duration(number(raw), option, zero=zero)
    except InputError as exc:
        raise BadInput(str(exc)) from None


def _resource_weights(given: tuple[str, ...]) -> tuple[ResourceWeight, ...]:
    """``--resource-weight`` values, by the rules of a queues file's ``resource_weights``."""
    flag = "--resource-weight"
    weights = tuple(resource_weight_of_text(raw, flag) for raw in given)
    check_resource_weights(weights, [f"{flag} {shown(raw)}" for raw in given])
    return weights


def number(raw: str) -> object:
    try:
        return int(raw)
    except ValueError:
        try:
            return float(raw) if "/" not in raw else raw
        except ValueError:
            return raw


def _nominal(raw: str) -> FlavorQuota:
    flavor, sep, rest = raw.partition(":")
    if not sep or not flavor:
        raise BadInput(f"--nominal: expected FLAVOR:RES=Q[,RES=Q], got {raw!r}")
    items = tuple(p for p in rest.split(",") if p)
    nominal = quantities(items, f"--nominal {flavor}")
    return FlavorQuota(
        flavor=FlavorName(check_name(flavor, "--nominal", SUBDOMAIN)), nominal=nominal
    )


def check_flavors(cq: ClusterQueue, config: Config) -> None:
    seen: set[str] = set()
    for q in cq.flavors:
        if q.flavor not in config.flavors:
            raise not_found("flavor", q.flavor, config.flavors)
        if q.flavor in seen:
            raise BadInput(f"--nominal: flavor {q.flavor!r} given twice")
        seen.add(q.flavor)
