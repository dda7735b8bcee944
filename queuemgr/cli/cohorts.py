"""``queuemgr cohort ...``: the tree of cohorts, with the verbs of the queues.

Why it exists: an organisation's quota is a tree (a division lends to its groups,
the groups to their teams); admins build it here: ``create``/``edit`` with
``--parent``, ``--weight`` and a cohort's own quota, ``list`` and ``describe``
showing each cohort's path, children and members.

What must stay true: flags are checked before the database is touched (exit 2
naming the flag); a parent that does not exist, or an edge that would close a
cycle, is refused naming the path (exit 2) and nothing is written; every change
goes through the audited store write (store.cohorts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import click

from queuemgr.cli.common import database, quantities
from queuemgr.cli.errors import BadInput, CliError, handled, not_found
from queuemgr.cli.flags import SUBDOMAIN, check_name, number
from queuemgr.cli.objects import delete_object, describe_object
from queuemgr.cli.output import emit, output_option, print_fields, print_table, vec
from queuemgr.core.cohort_tree import CohortTreeError
from queuemgr.core.model import Cohort, CohortName, FlavorName, FlavorQuota, Ordering
from queuemgr.core.resources import ResourceName
from queuemgr.core.snapshot import Config
from queuemgr.spec import checks as y
from queuemgr.store import admin
from queuemgr.store.audit import os_actor
from queuemgr.store.cohorts import upsert_cohort
from queuemgr.store.config_objects import load_config

INHERIT = "inherit"  # --ordering: the scheduler's

_OPTIONS = [
    click.option("--parent", default=None, help="The cohort this one lends to and borrows from."),
    click.option("--root", is_flag=True, help="edit: have no parent."),
    click.option("--weight", default=None, help="Fair-share weight among its parent's children."),
    click.option(
        "--ordering",
        default=None,
        type=click.Choice([*(o.value for o in Ordering), INHERIT]),
        help="Order among its borrowers and, by default, within its queues.",
    ),
    click.option("--fair-sharing/--no-fair-sharing", default=None, help="Fair-sharing preemption."),
    click.option("--flavor", default=None, help="The flavor of the quota flags below."),
    click.option("--nominal", "nominal", multiple=True, metavar="RES=QTY", help="Own quota."),
    click.option("--borrowing-limit", "borrowing", multiple=True, metavar="RES=QTY"),
    click.option("--lending-limit", "lending", multiple=True, metavar="RES=QTY"),
    click.option("--remove-flavor", is_flag=True, help="edit: drop its own quota on --flavor."),
]


def _cohort_flags(f: Any) -> Any:
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


@click.group("cohort")
def cohort() -> None:
    """Cohorts: a tree of ClusterQueues that lend each other idle quota."""


def _apply_flags(old: Cohort, f: dict[str, Any], config: Config) -> Cohort:
    """``old`` with the flags applied, every flag checked against ``config``."""
    changes: dict[str, Any] = {}
    if f["parent"] is not None and f["root"]:
        raise BadInput("--parent: cannot be combined with --root")
    if f["parent"] is not None:
        parent = CohortName(check_name(f["parent"], "--parent"))
        if parent not in config.cohorts and parent != old.name:
            raise not_found("cohort", parent, config.cohorts)
        changes["parent"] = parent
    if f["root"]:
        changes["parent"] = None
    if f["weight"] is not None:
        changes["weight"] = y.fraction(number(f["weight"]), "--weight")
    if f["ordering"] is not None:
        changes["ordering"] = None if f["ordering"] == INHERIT else Ordering(f["ordering"])
    if f["fair_sharing"] is not None:
        changes["fair_sharing"] = f["fair_sharing"]
    new = dataclasses.replace(old, **changes)
    quota_flags = f["nominal"] or f["borrowing"] or f["lending"] or f["remove_flavor"]
    if quota_flags:
        if f["flavor"] is None:
            raise BadInput("--flavor: name the flavor of the quota flags")
        flavor = FlavorName(check_name(f["flavor"], "--flavor", SUBDOMAIN))
        if flavor not in config.flavors:
            raise not_found("flavor", flavor, config.flavors)
        new = dataclasses.replace(new, flavors=_own_quota(new, flavor, f))
    elif f["flavor"] is not None:
        raise BadInput("--flavor: give --nominal, a limit or --remove-flavor with it")
    if new.parent is None and any(q.borrowing_limit or q.lending_limit for q in new.flavors):
        raise BadInput(
            "--borrowing-limit: only a cohort with a parent can have borrowing or lending limits"
        )
    return new


def _own_quota(c: Cohort, flavor: FlavorName, f: dict[str, Any]) -> tuple[FlavorQuota, ...]:
    if f["remove_flavor"]:
        return tuple(q for q in c.flavors if q.flavor != flavor)
    old = next((q for q in c.flavors if q.flavor == flavor), None)
    old = old or FlavorQuota(flavor=flavor, nominal={})
    nominal = {**old.nominal, **quantities(f["nominal"], "--nominal")}
    borrowing = {**old.borrowing_limit, **quantities(f["borrowing"], "--borrowing-limit")}
    lending = {**old.lending_limit, **quantities(f["lending"], "--lending-limit")}
    for arg, limits in (("--borrowing-limit", borrowing), ("--lending-limit", lending)):
        for r in limits:
            if r not in nominal:
                raise BadInput(f"{arg} {r}: {r} has no nominal quota (give --nominal {r}=...)")
    new = FlavorQuota(
        flavor=flavor, nominal=nominal, borrowing_limit=borrowing, lending_limit=lending
    )
    if old.flavor in {q.flavor for q in c.flavors}:
        return tuple(new if q.flavor == flavor else q for q in c.flavors)
    return (*c.flavors, new)


def _write(new: Cohort) -> bool:
    with database() as db, db.write() as conn:
        try:
            return upsert_cohort(conn, new, actor=os_actor())
        except CohortTreeError as exc:
            raise BadInput(f"--parent: {exc}") from None


@cohort.command("create")
@click.argument("name")
@_cohort_flags
@handled
def cohort_create(name: str, **given: Any) -> None:
    """Create Cohort NAME, a root unless --parent names one."""
    check_name(name, "NAME")
    with database() as db, db.read() as conn:
        config, _ = load_config(conn)
    if CohortName(name) in config.cohorts:
        raise CliError(f"cohort {name!r} already exists")
    _write(_apply_flags(Cohort(name=CohortName(name)), given, config))
    click.echo(f"cohort {name} created")


@cohort.command("edit")
@click.argument("name")
@_cohort_flags
@handled
def cohort_edit(name: str, **given: Any) -> None:
    """Change the fields of Cohort NAME that the flags name."""
    with database() as db, db.read() as conn:
        config, _ = load_config(conn)
    old = config.cohorts.get(CohortName(name))
    if old is None:
        raise not_found("cohort", name, config.cohorts)
    changed = _write(_apply_flags(old, given, config))
    click.echo(f"cohort {name} {'edited' if changed else 'unchanged'}")


@cohort.command("delete")
@click.argument("name")
@handled
def cohort_delete(name: str) -> None:
    """Delete Cohort NAME (refused while ClusterQueues or child cohorts belong to it)."""
    delete_object("cohort", name, admin.delete_cohort, lambda config: config.cohorts)
    click.echo(f"cohort {name} deleted")


def cohort_docs(config: Config) -> list[dict[str, Any]]:
    """Each cohort with its place in the tree, its own quota and its members."""
    tree = config.quota_topology.tree
    return [
        {
            "name": c,
            "path": tree.path(c),
            "parent": config.cohorts[c].parent,
            "children": tree.children.get(c, []),
            "weight": str(config.cohorts[c].weight),
            "ordering": None if (o := config.cohorts[c].ordering) is None else o.value,
            "fair_sharing": config.cohorts[c].fair_sharing,
            "quota": [
                {
                    "flavor": q.flavor,
                    "nominal": _vec(q.nominal),
                    "borrowing_limit": _vec(q.borrowing_limit) if q.borrowing_limit else None,
                    "lending_limit": _vec(q.lending_limit) if q.lending_limit else None,
                }
                for q in config.cohorts[c].flavors
            ],
            "cluster_queues": sorted(
                q.name for q in config.cluster_queues.values() if q.cohort == c
            ),
        }
        for c in sorted(config.cohorts, key=lambda c: tree.path(c))
    ]


def _vec(v: Mapping[ResourceName, int]) -> str:
    return vec({str(r): q for r, q in v.items()})


def _quota_text(doc: dict[str, Any]) -> str:
    return "; ".join(f"{q['flavor']}: {q['nominal']}" for q in doc["quota"]) or "-"


@cohort.command("list")
@output_option
@handled
def cohort_list(output: str) -> None:
    """Cohorts as a tree: each one's path, weight, own quota and member ClusterQueues."""
    with database() as db, db.read() as conn:
        config, _ = load_config(conn)
    emit(
        {"cohorts": cohort_docs(config)},
        output,
        lambda d: print_table(
            None,
            ("PATH", "WEIGHT", "OWN QUOTA", "CLUSTERQUEUES"),
            [
                (c["path"], c["weight"], _quota_text(c), ", ".join(c["cluster_queues"]) or "-")
                for c in d["cohorts"]
            ],
        ),
    )


@cohort.command("describe")
@click.argument("name")
@output_option
@handled
def cohort_describe(name: str, output: str) -> None:
    """Cohort NAME: its path, parent, children, own quota and members."""
    describe_object(
        "cohort", name, output, cohort_docs, lambda config: config.cohorts, _describe_table
    )


def _describe_table(d: dict[str, Any]) -> None:
    quota = []
    for q in d["quota"]:
        limits = [
            f"{label} {q[key]}"
            for key, label in (("borrowing_limit", "borrows"), ("lending_limit", "lends"))
            if q[key]
        ]
        quota.append(
            f"{q['flavor']}: {q['nominal']}" + (f" ({'; '.join(limits)})" if limits else "")
        )
    print_fields(
        [
            ("Name", d["name"]),
            ("Path", d["path"]),
            ("Parent", d["parent"] or "- (a root)"),
            ("Children", ", ".join(d["children"]) or "-"),
            ("Weight", d["weight"]),
            ("Ordering", d["ordering"] or "inherited"),
            ("Fair sharing", "yes" if d["fair_sharing"] else "no"),
            ("Own quota", "; ".join(quota) or "-"),
            ("Cluster queues", ", ".join(d["cluster_queues"]) or "-"),
        ]
    )
