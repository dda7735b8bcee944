"""A cycle's decisions, written: admissions with their placements, statuses and claims.

Why it exists: the service's loop is "load, ``schedule``, persist, apply";
``live`` is the load, this is the persist.

What must stay true: everything a cycle decided is written in ONE transaction
or nothing is; each admission is a conditional UPDATE on the queued states
that bumps ``version``, so of two writers admitting one workload exactly one
wins and the other's whole transaction rolls back (:class:`StateConflict`); a
pending preemptor's claim is written in the transaction that evicts its
victims and cleared in the one that admits it (or ends the claim).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection, text

from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import Admission, AdmittedWorkload, WorkloadId
from queuemgr.core.reasons import Decisions, PendingStatuses
from queuemgr.core.verdicts import PendingReason, Verdict
from queuemgr.store import codec
from queuemgr.store.arrays import literal
from queuemgr.store.live import Status
from queuemgr.store.row_keys import both_forms, row_keys
from queuemgr.store.transitions import legal_sources
from queuemgr.store.workloads import StateConflict, atomic

# One statement per kind of write, whatever the number of workloads: arrays
# unnested into a join. The state condition is what makes admission safe.
# By row id when the caller knows them, else by name (``store.row_keys``).
_ADMIT = """
UPDATE workloads AS w
SET state = 'Admitted', reason = 'Admitted', message = '', state_since = :now,
    admitted_at = :now, cluster_queue = d.cq, flavor = d.flavor, borrowing = d.borrowing,
    claim = NULL, requeue_at = NULL, version = w.version + 1
FROM unnest({key}, CAST(:cqs AS text[]), CAST(:flavors AS text[]),
            CAST(:borrowing AS boolean[]))
     AS d({key_names}, cq, flavor, borrowing)
WHERE {match}
  AND w.state = ANY(CAST(:sources AS workload_state[]))
RETURNING w.id, w.namespace, w.name, w.version
"""
_ADMIT_BY_NAME, _ADMIT_BY_ID = both_forms(_ADMIT)
# The states an admission leaves, checked against core.lifecycle as every move's are.
_QUEUED = legal_sources(WorkloadState.ADMITTED, (WorkloadState.PENDING, WorkloadState.INADMISSIBLE))

_PLACE = text("""
INSERT INTO placements (workload_id, pod_set, node, count)
SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:pod_sets AS text[]),
                     CAST(:nodes AS text[]), CAST(:counts AS int[]))
""")

# Statuses repeat (workloads of one shape share a verdict): each distinct one is
# sent once, and every row names it by its position (``which``, 1-based).
_SET_STATUS = """
UPDATE workloads AS w
SET state = CAST(s.state AS workload_state), reason = s.reason, message = s.message,
    state_since = CASE WHEN w.state = CAST(s.state AS workload_state) THEN w.state_since
                       ELSE :now END,
    version = w.version + 1
FROM unnest({key}, CAST(:which AS int[])) AS d({key_names}, which)
JOIN unnest(CAST(:states AS text[]), CAST(:reasons AS text[]), CAST(:messages AS text[]))
     WITH ORDINALITY AS s(state, reason, message, k) ON s.k = d.which
WHERE {match} AND w.state IN ('Pending', 'Inadmissible')
RETURNING w.namespace, w.name, w.version
"""
_STATUS_BY_NAME, _STATUS_BY_ID = both_forms(_SET_STATUS)


# A claim is set on a queued preemptor only: one that left the queue (cancelled
# meanwhile) is a lost race, and the cycle that evicted for it rolls back.
_SET_CLAIMS = text("""
UPDATE workloads AS w SET claim = CAST(d.claim AS jsonb), version = w.version + 1
FROM unnest(CAST(:ns AS text[]), CAST(:names AS text[]), CAST(:claims AS text[]))
     AS d(ns, name, claim)
WHERE w.namespace = d.ns AND w.name = d.name AND w.state IN ('Pending', 'Inadmissible')
RETURNING w.namespace, w.name, w.version
""")
_CLEAR_CLAIMS = text("""
UPDATE workloads AS w SET claim = NULL, version = w.version + 1
FROM unnest(CAST(:ns AS text[]), CAST(:names AS text[])) AS d(ns, name)
WHERE w.namespace = d.ns AND w.name = d.name AND w.claim IS NOT NULL
RETURNING w.namespace, w.name, w.version
""")


@dataclass(frozen=True, kw_only=True, slots=True)
class Persisted:
    admitted: int
    statuses_written: int
    claims_written: int = 0  # claims set or cleared (an admission clears its own)
    # What was written, for a caller that keeps its own copy of the rows
    # (``store.mirror``): each written row's new version, and the statuses.
    versions: Mapping[WorkloadId, int] = field(default_factory=dict, compare=False)
    statuses: Mapping[WorkloadId, Status] = field(default_factory=dict, compare=False)


def persist_decisions(
    conn: Connection,
    decisions: Decisions,
    *,
    now: float,
    previous: Mapping[WorkloadId, Status] | None = None,
    ids: Mapping[WorkloadId, int] | None = None,
    verdicts: Mapping[WorkloadId, Verdict] | None = None,
    shared: Collection[WorkloadId] = frozenset(),
) -> Persisted:
    """Write one cycle's decisions atomically; StateConflict if any admission lost a race.

    ``previous`` (``StoredState.statuses``) limits the status writes to the
    workloads whose state, reason or message changed; without it all are written.
    ``ids`` (workload -> row id, when the caller knows them) lets the admissions
    and status writes find their rows by primary key and send integers instead
    of names.
    ``verdicts`` (when the caller resolved them already, ``PendingStatuses.by_queue``)
    limits the status writes to those workloads, whose verdict may have changed: the
    caller vouches that every other pending one is as ``previous`` holds it.
    ``shared`` are the workloads whose reason and message the status board keeps with
    their class (``controller.board``): their rows get an empty message and keep the
    reason they have, so words that changed for a whole class (the room its queue has
    free, QuotaExceeded become CohortExhausted) are not written once per workload, nor
    is the first reason of every workload of a deep backlog. Such a row is written only
    when its state moves or its message is not empty yet, and then with the class's
    reason as well.
    """
    at = codec.timestamp(now)
    versions: dict[WorkloadId, int] = {}
    with atomic(conn):
        admitted = _admit(conn, decisions.admitted, at, versions, ids)
        statuses = _write_statuses(conn, decisions, at, previous, versions, ids, verdicts, shared)
        # Last, so that ``versions`` holds each row's final version.
        claims = _write_claims(conn, decisions, versions)
    return Persisted(
        admitted=admitted,
        statuses_written=len(statuses),
        claims_written=claims,
        versions=versions,
        statuses=statuses,
    )


def _write_claims(conn: Connection, decisions: Decisions, versions: dict[WorkloadId, int]) -> int:
    """Set the cycle's new claims, clear the ended ones; StateConflict if a preemptor left."""
    made = {c.workload.id: c for c in decisions.claims}
    admitted = decisions.admitted_ids() if decisions.released_claims else set()
    ended = [w for w in decisions.released_claims if w not in made and w not in admitted]
    written = 0
    if ended:
        names = [wid.partition("/") for wid in ended]
        rows = conn.execute(
            _CLEAR_CLAIMS,
            {"ns": [ns for ns, _, _ in names], "names": [name for _, _, name in names]},
        ).all()
        for r in rows:
            versions[WorkloadId(f"{r.namespace}/{r.name}")] = r.version
        written += len(rows)
    if made:
        names = [wid.partition("/") for wid in made]
        rows = conn.execute(
            _SET_CLAIMS,
            {
                "ns": [ns for ns, _, _ in names],
                "names": [name for _, _, name in names],
                "claims": [json.dumps(codec.claim_json(c)) for c in made.values()],
            },
        ).all()
        got = {WorkloadId(f"{r.namespace}/{r.name}"): r.version for r in rows}
        missing = [wid for wid in made if wid not in got]
        if missing:
            raise StateConflict("claim room for", missing)
        versions.update(got)
        written += len(rows)
    return written


def _admit(
    conn: Connection,
    admissions: tuple[AdmittedWorkload, ...],
    at: object,
    versions: dict[WorkloadId, int],
    ids: Mapping[WorkloadId, int] | None,
) -> int:
    if not admissions:
        return 0
    adm: list[Admission] = [a.admission for a in admissions]
    ws = [a.workload for a in admissions]
    params: dict[str, object] = {
        "now": at,
        "cqs": literal([str(a.cluster_queue) for a in adm]),
        "flavors": literal([str(a.flavor) for a in adm]),
        "borrowing": literal([a.borrowing for a in adm]),
        "sources": _QUEUED,
    }
    by_id, keys = row_keys([w.id for w in ws], ids)
    rows = conn.execute(_ADMIT_BY_ID if by_id else _ADMIT_BY_NAME, params | keys).all()
    row_ids: dict[str, int] = {}
    for rid, ns, name, version in rows:  # unpacked: a Row's columns by name cost more
        wid = WorkloadId(f"{ns}/{name}")
        row_ids[wid] = rid
        versions[wid] = version
    missing = [w.id for w in ws if w.id not in row_ids]
    if missing or len(rows) != len(ws):
        raise StateConflict("admit", missing)
    placed = [(row_ids[a.workload], p) for a in adm for p in a.placements]
    if placed:
        conn.execute(
            _PLACE,
            {
                "ids": literal([i for i, _ in placed]),
                "pod_sets": literal([p.pod_set for _, p in placed]),
                "nodes": literal([str(p.node) for _, p in placed]),
                "counts": literal([p.count for _, p in placed]),
            },
        )
    return len(rows)


def _verdict(statuses: PendingStatuses, wid: WorkloadId) -> Verdict | None:
    try:
        return statuses.verdict(wid)
    except KeyError:
        return None


def _write_statuses(
    conn: Connection,
    decisions: Decisions,
    at: object,
    previous: Mapping[WorkloadId, Status] | None,
    versions: dict[WorkloadId, int],
    ids: Mapping[WorkloadId, int] | None,
    verdicts: Mapping[WorkloadId, Verdict] | None,
    shared: Collection[WorkloadId],
) -> dict[WorkloadId, Status]:
    changed: dict[WorkloadId, Status] = {}
    statuses = decisions.pending
    # Only the verdict is needed (not positions or ETAs), and workloads of one
    # shape share one verdict: put each verdict's words together once.
    words: dict[tuple[int, bool], tuple[WorkloadState, str, str]] = {}
    if verdicts is not None:
        pairs: Iterable[tuple[WorkloadId, Verdict | None]] = verdicts.items()
    else:
        pairs = ((wid, _verdict(statuses, wid)) for wid in statuses)
    for wid, verdict in pairs:
        if verdict is None:  # not pending any more (admitted by this cycle)
            continue
        kept = wid in shared
        new = words.get((id(verdict), kept))
        if new is None:
            inadmissible = verdict.reason is PendingReason.INADMISSIBLE
            state = WorkloadState.INADMISSIBLE if inadmissible else WorkloadState.PENDING
            message = "" if kept else verdict.message
            new = words[(id(verdict), kept)] = (state, verdict.reason.value, message)
        old = None if previous is None else previous.get(wid)
        if kept and old is not None and old[0] is new[0] and old[2] == "":
            continue  # its class keeps its reason and message, and its state is as stored
        if old != new:
            changed[wid] = new
    if changed:
        distinct: dict[Status, int] = {}
        which = [distinct.setdefault(st, len(distinct) + 1) for st in changed.values()]
        params: dict[str, object] = {
            "now": at,
            "which": literal(which),
            "states": literal([st.value for st, _, _ in distinct]),
            "reasons": literal([reason for _, reason, _ in distinct]),
            "messages": literal([message for _, _, message in distinct]),
        }
        by_id, keys = row_keys(list(changed), ids)
        rows = conn.execute(_STATUS_BY_ID if by_id else _STATUS_BY_NAME, params | keys)
        for r in rows:
            versions[WorkloadId(f"{r.namespace}/{r.name}")] = r.version
    return changed
