"""The answer to "why is my job pending?": the leader's status board, or a cycle run here.

Why it exists: a pending workload's reason, positions and ETA come from a
scheduling cycle. While a leader runs, its last cycle's answer is on the
status board (``store.status_board``): one row and the few ahead of it, read
by index, in milliseconds at any backlog. When no leader kept the board
current (no service runs), the workload is newer than the last cycle, it
holds a preemptor's claim or backs off, or the user asks (``--evaluate``),
the pure ``schedule()`` runs here on a snapshot loaded from the store: the
answer the next cycle would give, with the core's own reason codes, messages,
positions and ETA. ``source`` in the document says which, ``as_of`` when.

What must stay true: nothing is written (the decisions are discarded); the
snapshot is loaded in one REPEATABLE READ transaction (``load_state``); the
policy is the one the last elected leader recorded (``scheduler_settings``),
else the default, and ordering by usage reads the saved decayed usage, so the
answer is the leader's; the document follows the ``why`` schema of docs/cli.md.
A tenant's answer is computed on every live workload too (``store.tenant_view``):
other namespaces' come under tokens (``hidden-…/w-…``), never by name.
A preemptor's claim (the room its victims free, kept in the store) is shown
with its victims and which of them still run (evicted, not requeued yet); a
workload backing off after a preemption says until when, and after how many.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from queuemgr.cli.output import duration
from queuemgr.core import schedule
from queuemgr.core.claims import Claim
from queuemgr.core.fairshare import decayed
from queuemgr.core.model import ClusterQueueName, WorkloadId
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.reasons import Decisions
from queuemgr.core.verdicts import BACKING_OFF, PendingReason
from queuemgr.spec.checks import InputError
from queuemgr.spec.knobs import parse_policy, policy_knobs
from queuemgr.store.admission_checks import CheckState, check_states
from queuemgr.store.handle import Database
from queuemgr.store.leadership import LeaderSettings, leader_settings
from queuemgr.store.repository import load_state
from queuemgr.store.state import StoredState
from queuemgr.store.status_board import ahead, cohort_path, standing, tree_and_running
from queuemgr.store.tenant_view import read_as_tenant, rows_are_filtered
from queuemgr.store.usage import load_queue_usage

AHEAD = 5  # how many workloads ahead are listed; the count is always complete
# A board older than this is no live leader's: a safety cycle refreshes it every few
# seconds while one runs. ``why`` then evaluates a cycle itself.
BOARD_FRESH_S = 30.0
WAITING_FOR_CHECK = "WaitingForAdmissionCheck"  # admitted as a reservation, not started
_REASONS = {r.value for r in PendingReason}

NO_ETA_INADMISSIBLE = "it could not start even on an idle cluster"
NO_ETA_PREEMPTING = (
    "it starts on the room it claimed in the first cycle after its victims' pods have "
    "stopped, and how long they take to stop is the cluster's to tell"
)
NO_ETA_UNDECLARED = (
    "it fits only once workloads without a declared max runtime have ended, "
    "and nobody knows when that is"
)


def _policy(
    db: Database, now: float, *, as_tenant: bool
) -> tuple[SchedulerPolicy, dict[str, Any] | None, Any]:
    """The last leader's policy and its record, and the decayed usage it orders by."""
    with db.read() as conn:
        settings = leader_settings(conn)
        if as_tenant:
            read_as_tenant(conn)
        saved = load_queue_usage(conn)
    policy, record = _leader(settings)
    if policy is None:  # none recorded, or unreadable: decide with the defaults
        return SchedulerPolicy(), record, {}
    usage = {
        key: decayed(u, 0.0, max(now - at, 0.0), policy.usage_half_life)
        for key, (u, at) in saved.items()
    }
    return policy, record, usage


def _leader(
    settings: LeaderSettings | None,
) -> tuple[SchedulerPolicy | None, dict[str, Any] | None]:
    """The policy the last elected leader recorded (None if none, or written by another
    version), and the record ``why`` shows of it."""
    if settings is None:
        return None, None
    record = {"replica": settings.replica, "elected_at": settings.elected_at.isoformat()}
    try:
        policy = parse_policy(settings.policy, "scheduler")
    except InputError:
        return None, record
    return policy, {**record, "knobs": policy_knobs(policy)}


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def _claim_doc(claim: Claim, stopping: frozenset[WorkloadId], *, stored: bool) -> dict[str, Any]:
    """A claim as ``why`` shows it; one not stored yet is the next cycle's to make."""
    victims = list(claim.victims)
    return {
        "flavor": claim.admission.flavor,
        "nodes": sorted({p.node for p in claim.admission.placements}),
        "victims": victims,
        # Evicted, not requeued yet: their pods may still run. A claim the next
        # cycle would make has its victims all running still.
        "still_running": [v for v in victims if v in stopping] if stored else victims,
        "made_at": _iso(claim.made_at) if stored else None,
    }


def _claim_message(c: dict[str, Any]) -> str:
    nodes, victims = ", ".join(c["nodes"]), ", ".join(c["victims"])
    if c["made_at"] is None:
        return (
            f"the next cycle preempts {victims} and claims {nodes} on flavor {c['flavor']} "
            "for it; it starts there once they have stopped"
        )
    running = c["still_running"]
    left = (
        f"still running (evicted, not requeued yet): {', '.join(running)}"
        if running
        else "all have stopped"
    )
    return (
        f"claims {nodes} on flavor {c['flavor']} since {c['made_at']}, freed by preempting "
        f"{victims}; {left}"
    )


def _backoff_doc(workload: dict[str, Any], until: float, now: float) -> dict[str, Any]:
    evictions = int(workload.get("evictions") or 0)
    times = "once" if evictions == 1 else f"{evictions} times"
    return {
        "until": _iso(until),
        "in_s": max(until - now, 0.0),
        "evictions": evictions,
        "message": (
            f"preempted {times}: backs off until {_iso(until)} "
            f"(in {duration(max(until - now, 0.0))}), then queues again"
        ),
    }


def _base_doc(wid: WorkloadId, workload: dict[str, Any], now: float) -> dict[str, Any]:
    """The document as the stored row tells it, before any cycle is evaluated."""
    return {
        "workload": wid,
        "state": workload["state"],
        "cluster_queue": workload["cluster_queue"],
        # Its ClusterQueue's cohort, as the path from the root of its tree.
        "cohort": None,
        "reason": workload["reason"],
        "message": workload["message"],
        "position_in_local_queue": None,
        "position_in_cluster_queue": None,
        "eta": None,
        "eta_in_s": None,
        "eta_reason": None,
        "ahead": [],
        "ahead_count": 0,
        "frees_up": None,
        "claim": None,
        "backoff": None,
        "scheduler": None,
        "evaluated_at": datetime.fromtimestamp(now, UTC).isoformat(),
        # "board": the leader's last cycle, as of ``as_of``; "evaluated": a cycle run here.
        "source": "evaluated",
        "as_of": datetime.fromtimestamp(now, UTC).isoformat(),
    }


def explain(
    db: Database, wid: WorkloadId, workload: dict[str, Any], *, now: float, evaluate: bool = False
) -> Any:
    """``why``'s document: from the leader's status board when it is current, else (or
    with ``evaluate``) from a scheduling cycle evaluated here."""
    doc = _base_doc(wid, workload, now)
    if workload["state"] not in ("Pending", "Inadmissible"):
        doc["eta_reason"] = f"not queued: the workload is {workload['state']}"
        if workload["cluster_queue"]:  # where it ran: its queue's cohort, as a queued one's
            with db.read() as conn:
                if rows_are_filtered(conn):
                    read_as_tenant(conn)
                doc["cohort"] = cohort_path(conn, workload["cluster_queue"])
        if workload["state"] == "Admitted":
            doc["message"] = (
                f"running on flavor {workload['flavor']} since {workload['admitted_at']}"
                + (" (borrowing cohort quota)" if workload["borrowing"] else "")
            )
            _admission_checks(db, doc, wid, workload)
        return doc
    # A tenant's row security hides the other namespaces, whose workloads decide its
    # place as much as its own do: it reads them all, theirs under tokens.
    with db.read() as conn:
        as_tenant = rows_are_filtered(conn)
    if not evaluate and not _backing_off(workload, now):
        boarded = _from_board(db, doc, wid, workload, now, as_tenant=as_tenant)
        if boarded is not None:
            return boarded
    state = load_state(db, now=now, as_tenant=as_tenant)
    until = state.backing_off.get(wid)
    if until is not None:
        backoff = _backoff_doc(workload, until, now)
        doc.update(
            reason=BACKING_OFF,
            message=backoff["message"],
            backoff=backoff,
            eta_reason=f"it backs off until {backoff['until']}; no cycle tries it before",
        )
        return doc
    if not any(p.id == wid for p in state.pending):
        return _stopped(doc, state, wid, workload)
    policy, doc["scheduler"], usage = _policy(db, now, as_tenant=as_tenant)
    snapshot = dataclasses.replace(state.snapshot(), policy=policy, queue_usage=usage)
    return _evaluated(doc, state, schedule(snapshot, now), wid, now)


def _admission_checks(
    db: Database, doc: dict[str, Any], wid: WorkloadId, workload: dict[str, Any]
) -> None:
    """An admission held as a reservation until its checks pass: which one it waits for."""
    with db.read() as conn:
        states = check_states(conn, [wid]).get(wid, {})
    at = workload.get("admitted_at")
    admitted_at = None if at is None else datetime.fromisoformat(at).timestamp()
    mine = {c: s for c, s in states.items() if s.of_admission(admitted_at)}
    if not mine:
        return
    doc["admission_checks"] = [
        {"check": c, "state": s.state.value, "message": s.message} for c, s in sorted(mine.items())
    ]
    waiting = [
        f"{c} ({s.message or s.state.value})"
        for c, s in sorted(mine.items())
        if s.state is not CheckState.READY
    ]
    if waiting:
        doc["reason"] = WAITING_FOR_CHECK
        doc["message"] = "; ".join(waiting)
        doc["eta_reason"] = (
            f"its quota is reserved on flavor {workload['flavor']} since {at};"
            " its job starts once every admission check is Ready"
        )


def _backing_off(workload: dict[str, Any], now: float) -> bool:
    at = workload.get("requeue_at")
    return at is not None and datetime.fromisoformat(at).timestamp() > now


def _from_board(
    db: Database,
    doc: dict[str, Any],
    wid: WorkloadId,
    workload: dict[str, Any],
    now: float,
    *,
    as_tenant: bool,
) -> dict[str, Any] | None:
    """The answer from the leader's status board, None when the board cannot give it.

    It cannot when no leader brought it up to date lately (no service runs, or
    it is stuck), when the last cycle has not seen this workload yet, or when
    the workload holds a preemptor's claim, whose victims' state the board
    does not keep: those are evaluated here.
    """
    ns, _, name = wid.partition("/")
    with db.read() as conn:
        settings = leader_settings(conn)
        if as_tenant:
            read_as_tenant(conn)
        found = standing(conn, ns, name)
        if found is None or found.claimed or now - found.at.timestamp() > BOARD_FRESH_S:
            return None
        entry = found.entry
        cq = entry.cluster_queue
        ahead_of = [] if cq is None else ahead(conn, cq, entry.rank, limit=AHEAD)
        path, running = (None, []) if cq is None else tree_and_running(conn, cq)
        cohort = None if path is None else path.split("/")[0]  # the root of its tree
    doc["scheduler"] = _leader(settings)[1]  # the leader decided; its record is shown
    doc.update(
        cluster_queue=cq,
        cohort=path,
        position_in_local_queue=entry.position_in_local_queue,
        position_in_cluster_queue=entry.position_in_queue,  # 0 when it routes nowhere, as evaluated
        as_of=found.at.isoformat(),
        source="board",
    )
    reason = PendingReason(workload["reason"]) if workload["reason"] in _REASONS else None
    _eta(doc, None if entry.eta is None else max(entry.eta, now), reason, now)
    if cq is not None:
        ends = [
            (
                None if r.max_runtime is None else r.admitted_at.timestamp() + r.max_runtime,
                r.workload,
                r.gpus,
            )
            for r in running
        ]
        scope = f"cohort {cohort}" if cohort else f"cluster queue {cq}"
        doc["frees_up"] = _frees_up_doc(scope, ends, int(workload.get("gpus") or 0), now)
        doc["ahead_count"] = max(entry.position_in_queue - 1, 0)
        doc["ahead"] = [
            {"workload": a.workload, "position": a.position, "reason": a.reason, "gpus": a.gpus}
            for a in ahead_of
        ]
    return doc


def _stopped(
    doc: dict[str, Any], state: StoredState, wid: WorkloadId, workload: dict[str, Any]
) -> dict[str, Any]:
    """``load_state`` withholds the pending workloads of a stopped ClusterQueue."""
    ns = wid.partition("/")[0]
    lq = state.config.local_queues.get((ns, workload["local_queue"]))
    cq = None if lq is None else lq.cluster_queue
    doc.update(
        cluster_queue=cq,
        reason="ClusterQueueStopped",
        message=f"cluster queue {cq} is stopped: nothing is admitted from it until resumed",
        eta_reason="the cluster queue is stopped",
    )
    return doc


def _evaluated(
    doc: dict[str, Any], state: StoredState, decisions: Decisions, wid: WorkloadId, now: float
) -> dict[str, Any]:
    """What the next cycle, evaluated here, does with ``wid``, and who is ahead of it."""
    stored = state.claims.get(wid)
    if wid in decisions.released_claims:
        stored = None  # the claimed room is gone: it queues as any other
    if stored is not None:
        doc["claim"] = _claim_doc(stored, state.stopping, stored=True)
    admitted = list(decisions.admitted)
    mine = next((a for a in admitted if a.workload.id == wid), None)
    if mine is not None:
        doc["cohort"] = _cohort_of(state, mine.admission.cluster_queue)
        doc.update(
            cluster_queue=mine.admission.cluster_queue,
            reason="Admissible",
            message=(
                f"fits now: the next scheduling cycle admits it on flavor {mine.admission.flavor}"
                + (" (borrowing)" if mine.admission.borrowing else "")
                + (", on the room it claimed" if stored is not None else "")
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
    made = next((c for c in decisions.claims if c.workload.id == wid), None)
    if made is not None and stored is None:
        doc["claim"] = _claim_doc(made, state.stopping, stored=False)
    if st.reason is PendingReason.PREEMPTING and doc["claim"] is not None:
        doc["message"] = _claim_message(doc["claim"])
    _eta(doc, st.eta, st.reason, now)
    if st.cluster_queue is not None:
        doc["cohort"] = _cohort_of(state, st.cluster_queue)
        doc["frees_up"] = _frees_up(state, st.cluster_queue, wid, now)
        ahead = _ahead(state, decisions, st.cluster_queue, st.position_in_cluster_queue)
        doc["ahead_count"] = len(ahead)
        doc["ahead"] = ahead[:AHEAD]
    return doc


def _cohort_of(state: StoredState, cq: ClusterQueueName) -> str | None:
    """The path of ``cq``'s cohort from its root, or None for a queue in no cohort."""
    queue = state.config.cluster_queues.get(cq)
    if queue is None or queue.cohort is None:
        return None
    return state.config.quota_topology.tree.path(queue.cohort)


def _eta(doc: dict[str, Any], eta: float | None, reason: PendingReason | None, now: float) -> None:
    if eta is not None:
        doc["eta"] = datetime.fromtimestamp(eta, UTC).isoformat()
        doc["eta_in_s"] = max(eta - now, 0.0)
    elif reason is PendingReason.PREEMPTING:
        doc["eta_reason"] = NO_ETA_PREEMPTING
    elif reason is PendingReason.INADMISSIBLE:
        doc["eta_reason"] = NO_ETA_INADMISSIBLE
    else:
        doc["eta_reason"] = NO_ETA_UNDECLARED


def _ahead(
    state: StoredState, decisions: Decisions, cq: str, position: int
) -> list[dict[str, Any]]:
    """The workloads of ``cq`` the cycle admits, then those pending before ``position``."""
    ahead: list[dict[str, Any]] = [
        {"workload": a.workload.id, "position": 0, "reason": "Admissible", "gpus": a.workload.gpus}
        for a in decisions.admitted
        if a.admission.cluster_queue == cq
    ]
    for other in decisions.pending.values():
        if other.cluster_queue == cq and other.position_in_cluster_queue < position:
            ahead.append(
                {
                    "workload": other.workload,
                    "position": other.position_in_cluster_queue,
                    "reason": other.reason.value,
                    "gpus": _gpus(state, other.workload),
                }
            )
    ahead.sort(key=lambda a: (a["position"], a["workload"]))
    return ahead


def _frees_up(state: StoredState, cq: str, wid: WorkloadId, now: float) -> dict[str, Any]:
    """Which admitted workloads of its cohort (or queue) end first, by declared max runtime."""
    config = state.config
    topo = config.quota_topology
    # A loan may come from anywhere in its cohort tree: every run of the tree counts.
    cohort = topo.root_of.get(ClusterQueueName(cq))
    members = set(topo.members.get(cohort, ())) if cohort is not None else set()
    members = members or {ClusterQueueName(cq)}
    running = [
        (
            None if a.workload.max_runtime is None else a.admitted_at + a.workload.max_runtime,
            a.workload.id,
            a.workload.gpus,
        )
        for a in state.admitted
        if a.admission.cluster_queue in members
    ]
    scope = f"cohort {cohort}" if cohort else f"cluster queue {cq}"
    return _frees_up_doc(scope, running, _gpus(state, wid), now)


def _frees_up_doc(
    scope: str, running: Sequence[tuple[float | None, str, int]], need: int, now: float
) -> dict[str, Any]:
    """Listed in end order until they free as many GPUs as the workload needs: what must
    free up for it, when nothing else changes. ``running``: (declared end, id, GPUs)."""
    ends = sorted((end, other, gpus) for end, other, gpus in running if end is not None)
    ending: list[dict[str, Any]] = []
    freed, horizon = 0, now
    for end, other, gpus in ends:
        if ending and freed >= need:
            break
        freed, horizon = freed + gpus, end
        iso = datetime.fromtimestamp(end, UTC).isoformat()
        ending.append({"workload": other, "ends_at": iso, "gpus": gpus})
    if ending:
        message = (
            f"{len(ending)} admitted workload(s) in {scope} end within "
            f"{duration(max(horizon - now, 0.0))} by their declared max runtime, "
            f"freeing {freed} GPUs (it needs {need})"
        )
    else:
        message = f"no admitted workload in {scope} declares a max runtime"
    unknown = len(running) - len(ends)
    if unknown:
        message += f"; {unknown} more run without a declared runtime"
    return {"message": message, "ending": ending, "without_runtime": unknown}


def _gpus(state: Any, wid: str) -> int:
    for w in state.pending:
        if w.id == wid:
            return int(w.gpus)
    return 0
