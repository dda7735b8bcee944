"""``queuemgr audit [--since 7d] [--object KIND/NAME]``: who changed what, before and after.

Why it exists: quota is contested; every admin write leaves an append-only
``audit_log`` row in the transaction of the change, and this is how people
read it: newest first, with the changed fields spelled out.

What must stay true: the JSON document carries each row's full ``before``
and ``after`` plus the field diff, in the ``audit`` schema of docs/cli.md;
``--object`` accepts the kind's short names (cq, lq, flavor, cohort, node).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import click

from queuemgr.cli.common import database
from queuemgr.cli.errors import BadInput, handled
from queuemgr.cli.output import (
    changed_fields,
    describe_changes,
    emit,
    iso,
    output_option,
    print_table,
)
from queuemgr.spec.knobs import parse_duration
from queuemgr.store import admin

KINDS = {
    "cq": "ClusterQueue",
    "clusterqueue": "ClusterQueue",
    "lq": "LocalQueue",
    "localqueue": "LocalQueue",
    "flavor": "ResourceFlavor",
    "resourceflavor": "ResourceFlavor",
    "cohort": "Cohort",
    "node": "Node",
    "grant": "TenantGrant",
    "tenantgrant": "TenantGrant",
}


def parse_object(raw: str) -> tuple[str, str | None]:
    """``cq/team-a`` -> (ClusterQueue, team-a); ``lq/ns/name`` keeps ``ns/name``; ``cq`` alone."""
    kind, _, name = raw.partition("/")
    full = KINDS.get(kind.lower())
    if full is None:
        raise BadInput(f"--object: unknown kind {kind!r} (expected one of: {', '.join(KINDS)})")
    return full, name or None


@click.command("audit")
@click.option("--since", default=None, help="Only changes this recent: 90m, 12h, 7d, 2w.")
@click.option("--object", "obj", default=None, metavar="KIND[/NAME]", help="e.g. cq/team-a.")
@click.option("--limit", type=click.IntRange(min=1), default=200, show_default=True)
@output_option
@handled
def audit(since: str | None, obj: str | None, limit: int, output: str) -> None:
    """Who changed queues and quotas, when, from what to what (newest first)."""
    after = None
    if since is not None:
        after = datetime.now(UTC) - timedelta(seconds=parse_duration(since, "--since"))
    kind, name = parse_object(obj) if obj else (None, None)
    with database() as db, db.read() as conn:
        entries = admin.audit_entries(conn, since=after, kind=kind, name=name, limit=limit)
    doc = {
        "entries": [
            {
                "id": e.id,
                "at": iso(e.at),
                "db_role": e.db_role,
                "actor": e.actor,
                "action": e.action,
                "kind": e.kind,
                "name": e.name,
                "before": e.before,
                "after": e.after,
                "changes": changed_fields(e.before, e.after) if e.action == "update" else {},
            }
            for e in entries
        ]
    }
    emit(doc, output, _table)


def _table(doc: dict[str, Any]) -> None:
    rows = [
        (
            e["at"][:19].replace("T", " "),
            e["actor"],
            e["db_role"],
            e["action"],
            f"{e['kind']}/{e['name']}",
            _summary(e),
        )
        for e in doc["entries"]
    ]
    print_table(None, ("AT (UTC)", "ACTOR", "DB ROLE", "ACTION", "OBJECT", "CHANGES"), rows)


def _summary(e: dict[str, Any]) -> str:
    if e["action"] == "create":
        return "created"
    if e["action"] == "delete":
        return "deleted"
    if e["action"] != "update":  # a record such as quota-lowered: its facts are in ``after``
        after = e["after"] or {}
        over = ", ".join(w["workload"] for w in after.get("over_quota", []))
        return (
            f"flavor={after.get('flavor')} policy={after.get('policy')} over quota: {over or '-'}"
        )
    return describe_changes(e["changes"]) or "-"
