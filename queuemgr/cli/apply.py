"""``queuemgr apply -f queues.yaml [--dry-run] [--prune]``: declarative, idempotent config.

Why it exists: admins keep queues and quotas in git; applying the same file
twice must change nothing and report nothing, so a GitOps loop can run it
blindly. The file has the shape of a ``simulate`` scenario without ``nodes``
and ``workloads`` (docs/cli.md), and is parsed by the simulator's strict
parsers, so both accept and reject exactly the same objects.

What must stay true: the diff is computed from the database inside the same
transaction that writes it; every write of one apply (upserts, then prunes in
reference order) commits in ONE transaction with its audit rows, or none
does; ``--dry-run`` writes nothing; a bad file exits 2 naming the file and
the YAML path; a ClusterQueue's ``stopped`` flag is not the file's business
and is kept as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from queuemgr.cli.common import database
from queuemgr.cli.errors import handled
from queuemgr.cli.output import changed_fields, describe_changes, emit, output_option
from queuemgr.core.model import ClusterQueueName, CohortName, FlavorName
from queuemgr.core.snapshot import Config
from queuemgr.spec import checks as y
from queuemgr.spec.checks import InputError
from queuemgr.spec.scenario import parse_scenario
from queuemgr.store import admin, codec
from queuemgr.store.audit import os_actor
from queuemgr.store.cohorts import upsert_cohort
from queuemgr.store.config_objects import (
    load_config,
    upsert_cluster_queue,
    upsert_flavor,
    upsert_local_queue,
)
from queuemgr.store.handle import Tx

SECTIONS = ("flavors", "cohorts", "cluster_queues", "local_queues")
# Creation order; deletion runs in reverse, so nothing is deleted while referenced.
KINDS = ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")

Key = tuple[str, str]  # (kind, name)


def load_queues_file(path: Path) -> Config:
    """Parse an apply file; every problem is an :class:`InputError` naming file and path."""
    try:
        raw = y.read_yaml(path, "queues file")
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    try:
        top = y.mapping(raw, "", required=("flavors", "cluster_queues"), optional=SECTIONS)
        return parse_scenario({**top, "nodes": []}).config
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None


def documents(config: Config, stopped: frozenset[ClusterQueueName]) -> dict[Key, dict[str, Any]]:
    """Each object as the audit log spells it, keyed by (kind, name)."""
    out: dict[Key, dict[str, Any]] = {}
    for f in config.flavors.values():
        out[("ResourceFlavor", f.name)] = codec.flavor_json(f)
    for c in config.cohorts.values():
        out[("Cohort", c.name)] = codec.cohort_json(c)
    for cq in config.cluster_queues.values():
        out[("ClusterQueue", cq.name)] = codec.cluster_queue_json(cq, stopped=cq.name in stopped)
    for lq in config.local_queues.values():
        out[("LocalQueue", f"{lq.namespace}/{lq.name}")] = codec.local_queue_json(lq)
    return out


@dataclass(frozen=True, kw_only=True)
class Change:
    action: str  # create, update, delete
    kind: str
    name: str
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)

    def doc(self) -> dict[str, Any]:
        return {"action": self.action, "kind": self.kind, "name": self.name, "fields": self.fields}


def plan(desired: Config, conn: Tx, *, prune: bool) -> tuple[list[Change], int]:
    """The changes that make the database match ``desired``; and how many objects it ignores."""
    current, stopped = load_config(conn)
    have = documents(current, stopped)
    want = documents(desired, stopped)
    changes: list[Change] = []
    for kind in KINDS:
        for key in sorted(k for k in want if k[0] == kind):
            before = have.get(key)
            if before is None:
                changes.append(Change(action="create", kind=kind, name=key[1]))
            elif before != want[key]:
                fields = changed_fields(before, want[key])
                changes.append(Change(action="update", kind=kind, name=key[1], fields=fields))
    extra = [k for k in have if k not in want]
    if prune:
        tree = current.quota_topology.tree
        for kind in reversed(KINDS):
            doomed = sorted(k for k in extra if k[0] == kind)
            if kind == "Cohort":  # children before their parents
                doomed.sort(key=lambda k: -tree.depth(CohortName(k[1])))
            for key in doomed:
                changes.append(Change(action="delete", kind=kind, name=key[1]))
    return changes, 0 if prune else len(extra)


def execute(desired: Config, conn: Tx, changes: list[Change], actor: str) -> None:
    """Write ``changes`` (from :func:`plan`) on ``conn``; the caller owns the transaction."""
    _, stopped = load_config(conn)
    todo = {(c.kind, c.name) for c in changes if c.action != "delete"}
    for f in desired.flavors.values():
        if ("ResourceFlavor", f.name) in todo:
            upsert_flavor(conn, f, actor=actor)
    # Parents before children, by depth in the desired tree: each cohort is written
    # after every ancestor has its final parent, so no write sees a half-made cycle.
    for cohort in desired.quota_topology.tree.top_down():
        if ("Cohort", cohort) in todo:
            upsert_cohort(conn, desired.cohorts[cohort], actor=actor)
    for cq in desired.cluster_queues.values():
        if ("ClusterQueue", cq.name) in todo:
            upsert_cluster_queue(conn, cq, actor=actor, stopped=cq.name in stopped)
    for lq in desired.local_queues.values():
        if ("LocalQueue", f"{lq.namespace}/{lq.name}") in todo:
            upsert_local_queue(conn, lq, actor=actor)
    for c in changes:  # plan() lists deletions in reverse reference order
        if c.action != "delete":
            continue
        if c.kind == "LocalQueue":
            ns, _, name = c.name.partition("/")
            admin.delete_local_queue(conn, ns, name, actor=actor)
        elif c.kind == "ClusterQueue":
            admin.delete_cluster_queue(conn, c.name, actor=actor)
        elif c.kind == "Cohort":
            admin.delete_cohort(conn, c.name, actor=actor)
        else:
            admin.delete_flavor(conn, FlavorName(c.name), actor=actor)


@click.command("apply")
@click.option(
    "-f",
    "--filename",
    "path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Queues file: flavors, cohorts, cluster_queues, local_queues (docs/cli.md).",
)
@click.option("--dry-run", is_flag=True, help="Print the diff and write nothing.")
@click.option("--prune", is_flag=True, help="Delete objects the file no longer lists.")
@output_option
@handled
def apply(path: Path, dry_run: bool, prune: bool, output: str) -> None:
    """Create, update (and with --prune delete) queues and quotas to match a file."""
    desired = load_queues_file(path)
    with database() as db:
        if dry_run:  # planned in a transaction that writes nothing
            with db.read() as conn:
                changes, ignored = plan(desired, conn, prune=prune)
        else:  # planned and written in one transaction: the plan is what gets written
            with db.write() as conn:
                changes, ignored = plan(desired, conn, prune=prune)
                execute(desired, conn, changes, os_actor())
    doc = {
        "dry_run": dry_run,
        "changes": [c.doc() for c in changes],
        "not_in_file": ignored,
    }
    emit(doc, output, _print)


def _print(doc: dict[str, Any]) -> None:
    verbs = {"create": "created", "update": "updated", "delete": "deleted"}
    if doc["dry_run"]:
        verbs = {"create": "would create", "update": "would update", "delete": "would delete"}
    for c in doc["changes"]:
        line = f"{verbs[c['action']]} {c['kind']} {c['name']}"
        if c["fields"]:
            line += f": {describe_changes(c['fields'])}"
        click.echo(line)
    if not doc["changes"]:
        click.echo("no changes", err=True)
    if doc["not_in_file"]:
        click.echo(
            f"note: {doc['not_in_file']} objects in the database are not in the file "
            "(--prune deletes them)",
            err=True,
        )
