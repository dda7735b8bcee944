"""The answer to "why is my job pending?", computed from a fresh scheduling cycle.

Why it exists: the stored reason is only as fresh as the service's last
cycle (and absent when no service runs). Running the pure ``schedule()`` on a
snapshot loaded from the store gives the answer the next cycle would give,
with the core's own reason codes, messages, positions and ETA.

What must stay true: nothing is written (the decisions are discarded); the
snapshot is loaded in one REPEATABLE READ transaction (``load_state``); the
policy is the default one (the service's ``scheduler:`` knobs are not known
here; docs/cli.md says so); the document follows the ``why`` schema of
docs/cli.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
from sqlalchemy import Engine

from queuemgr.cli.output import duration, print_fields
from queuemgr.core import schedule
from queuemgr.core.model import WorkloadId
from queuemgr.store.repository import load_state

AHEAD = 5  # how many workloads ahead are listed; the count is always complete

NO_ETA = (
    "only a workload holding a reservation gets an ETA (scheduler reservation_depth), "
    "and none covers this one"
)


def explain(engine: Engine, wid: WorkloadId, workload: dict[str, Any], *, now: float) -> Any:
    doc: dict[str, Any] = {
        "workload": wid,
        "state": workload["state"],
        "cluster_queue": workload["cluster_queue"],
        "reason": workload["reason"],
        "message": workload["message"],
        "position_in_local_queue": None,
        "position_in_cluster_queue": None,
        "eta": None,
        "eta_in_s": None,
        "eta_reason": None,
        "ahead": [],
        "ahead_count": 0,
        "evaluated_at": datetime.fromtimestamp(now, UTC).isoformat(),
    }
    if workload["state"] not in ("Pending", "Inadmissible"):
        doc["eta_reason"] = f"not queued: the workload is {workload['state']}"
        if workload["state"] == "Admitted":
            doc["message"] = (
                f"running on flavor {workload['flavor']} since {workload['admitted_at']}"
                + (" (borrowing cohort quota)" if workload["borrowing"] else "")
            )
        return doc
    state = load_state(engine)
    config = state.config
    if not any(p.id == wid for p in state.pending):
        # load_state withholds the pending workloads of a stopped ClusterQueue.
        ns = wid.partition("/")[0]
        lq = config.local_queues.get((ns, workload["local_queue"]))
        cq = None if lq is None else lq.cluster_queue
        doc.update(
            cluster_queue=cq,
            reason="ClusterQueueStopped",
            message=f"cluster queue {cq} is stopped: nothing is admitted from it until resumed",
            eta_reason="the cluster queue is stopped",
        )
        return doc
    decisions = schedule(state.snapshot(), now)
    admitted = list(decisions.admitted)
    mine = next((a for a in admitted if a.workload.id == wid), None)
    if mine is not None:
        doc.update(
            cluster_queue=mine.admission.cluster_queue,
            reason="Admissible",
            message=(
                f"fits now: the next scheduling cycle admits it on flavor {mine.admission.flavor}"
                + (" (borrowing)" if mine.admission.borrowing else "")
            ),
            eta=doc["evaluated_at"],
            eta_in_s=0.0,
        )
        return doc
    st = decisions.pending[wid]
    doc.update(
        cluster_queue=st.cluster_queue,
        reason=st.reason.value,
        message=st.message,
        position_in_local_queue=st.position_in_local_queue,
        position_in_cluster_queue=st.position_in_cluster_queue,
    )
    if st.eta is not None:
        doc["eta"] = datetime.fromtimestamp(st.eta, UTC).isoformat()
        doc["eta_in_s"] = max(st.eta - now, 0.0)
    else:
        doc["eta_reason"] = NO_ETA
    ahead: list[dict[str, Any]] = [
        {"workload": a.workload.id, "position": 0, "reason": "Admissible", "gpus": a.workload.gpus}
        for a in admitted
        if st.cluster_queue is not None and a.admission.cluster_queue == st.cluster_queue
    ]
    if st.cluster_queue is not None:
        for other in decisions.pending.values():
            if (
                other.cluster_queue == st.cluster_queue
                and other.position_in_cluster_queue < st.position_in_cluster_queue
            ):
                ahead.append(
                    {
                        "workload": other.workload,
                        "position": other.position_in_cluster_queue,
                        "reason": other.reason.value,
                        "gpus": _gpus(state, other.workload),
                    }
                )
    ahead.sort(key=lambda a: (a["position"], a["workload"]))
    doc["ahead_count"] = len(ahead)
    doc["ahead"] = ahead[:AHEAD]
    return doc


def _gpus(state: Any, wid: str) -> int:
    for w in state.pending:
        if w.id == wid:
            return int(w.gpus)
    return 0


def print_why(d: dict[str, Any]) -> None:
    pairs: list[tuple[str, object]] = [
        ("Workload", d["workload"]),
        ("State", d["state"]),
        ("Cluster queue", d["cluster_queue"] or "-"),
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
    print_fields(pairs)
    if d["ahead"]:
        click.echo(f"Ahead of it ({d['ahead_count']}):")
        for a in d["ahead"]:
            where = "admitted next cycle" if a["position"] == 0 else f"#{a['position']}"
            click.echo(f"  {where:<20} {a['workload']}  {a['gpus']} GPUs  {a['reason']}")
        if d["ahead_count"] > len(d["ahead"]):
            click.echo(f"  ... and {d['ahead_count'] - len(d['ahead'])} more")
