"""``why``'s document as a table: the fields a person reads, then who is ahead.

Why it exists: ``cli.explain`` builds the document (``-o json|yaml`` prints it
whole); this is its table form, kept apart so that the two change separately.

What must stay true: it prints only what the document holds, so the table and
the JSON never disagree; another tenant's workloads appear under the tokens the
document already carries.
"""

from __future__ import annotations

from typing import Any

import click

from queuemgr.cli.output import duration, print_fields


def print_why(d: dict[str, Any]) -> None:
    pairs: list[tuple[str, object]] = [
        ("Workload", d["workload"]),
        ("State", d["state"]),
        ("Cluster queue", d["cluster_queue"] or "-"),
        ("Cohort", d.get("cohort") or "-"),
        ("Reason", d["reason"]),
        ("Message", d["message"] or "-"),
    ]
    if d["position_in_cluster_queue"] is not None:
        pairs.append(
            (
                "Position",
                f"{d['position_in_local_queue']} in its LocalQueue, "
                f"{d['position_in_cluster_queue']} in its ClusterQueue",
            )
        )
    if d["eta"] is not None:
        pairs.append(("ETA", f"{d['eta']} (in {duration(d['eta_in_s'])})"))
    elif d["state"] in ("Pending", "Inadmissible"):
        pairs.append(("ETA", f"none: {d['eta_reason']}"))
    if d["frees_up"] is not None:
        pairs.append(("Frees up", d["frees_up"]["message"]))
    claim = d.get("claim")
    if claim is not None:
        running = ", ".join(claim["still_running"]) or "none"
        pairs.append(
            (
                "Claim",
                f"{', '.join(claim['nodes'])} on {claim['flavor']}, freed by preempting "
                f"{', '.join(claim['victims'])} (still running: {running})",
            )
        )
    if d.get("source") == "board":
        pairs.append(("As of", f"{d['as_of']} (the leader's last cycle)"))
    backoff = d.get("backoff")
    if backoff is not None:
        pairs.append(
            ("Backoff", f"until {backoff['until']}, after {backoff['evictions']} eviction(s)")
        )
    print_fields(pairs)
    if d["ahead"]:
        click.echo(f"Ahead of it ({d['ahead_count']}):")
        for a in d["ahead"]:
            where = "admitted next cycle" if a["position"] == 0 else f"#{a['position']}"
            click.echo(f"  {where:<20} {a['workload']}  {a['gpus']} GPUs  {a['reason']}")
        if d["ahead_count"] > len(d["ahead"]):
            click.echo(f"  ... and {d['ahead_count'] - len(d['ahead'])} more")
