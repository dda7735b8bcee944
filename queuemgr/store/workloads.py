"""Workload rows: submit, load for a cycle, and persist a cycle's decisions.

Why it exists: the service's loop is "load, ``schedule``, persist, apply"; this
module is the load and the persist (moves outside a cycle are in ``transitions``).

What must stay true:

- a cycle's decisions are written in ONE transaction: every admission with
  its placements and every changed pending reason, or nothing at all;
- every state change is a conditional UPDATE on the states it may leave
  (``queuemgr.core.lifecycle``) that bumps ``version``. Postgres re-checks the
  condition after waiting for a concurrent writer's row lock, so of two
  writers admitting one workload exactly one wins; the other gets
  :class:`StateConflict` and its whole transaction rolls back;
- placements are live occupancy: written on admission, deleted on finish or
  eviction, so ``placements`` answers "what runs on this node";
- a pending preemptor's claim (``core.claims``) is written in the transaction
  that evicts its victims and cleared in the one that admits it (or ends the
  claim), so a new leader holds exactly the claims the old one committed;
- a queued row whose ``requeue_at`` is after the cycle's ``now`` backs off:
  it is no pending workload of that cycle.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.exc import IntegrityError

from queuemgr.core.claims import Claim
from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    NodeName,
    PodSet,
    PodSetPlacement,
    Workload,
    WorkloadId,
)
from queuemgr.core.reasons import Decisions
from queuemgr.core.verdicts import PendingReason
from queuemgr.store import codec


class StateConflict(RuntimeError):
    """A workload was not in a state the write expected (e.g. already admitted)."""

    def __init__(self, action: str, workloads: Sequence[str]) -> None:
        shown = ", ".join(sorted(workloads)[:10])
        super().__init__(f"cannot {action}: not in an expected state (or missing): {shown}")
        self.workloads = list(workloads)


class WorkloadExists(RuntimeError):
    pass


@contextmanager
def atomic(conn: Connection) -> Iterator[None]:
    """This block commits whole or not at all (a savepoint inside a caller's transaction)."""
    if conn.in_transaction():
        with conn.begin_nested():
            yield
    else:
        with conn.begin():
            yield


def insert_workload(conn: Connection, w: Workload) -> int:
    """Submit ``w`` as Pending; returns its row id. Raises WorkloadExists for a duplicate.

    Through ``queuemgr_submit`` (migration 0010), the one way into the table for
    every submitter: a tenant has no INSERT of its own, and the function checks
    its namespace grant, its LocalQueue and the shape of the pod sets. It
    notifies the scheduler in this transaction.
    """
    try:
        with atomic(conn):
            wid = conn.execute(
                _SUBMIT,
                {
                    "ns": w.namespace,
                    "name": w.name,
                    "queue": w.queue,
                    "priority": w.priority,
                    "created": codec.timestamp(w.created_at),
                    "max_runtime": w.max_runtime,
                    "pod_sets": json.dumps([codec.pod_set(ps) for ps in w.pod_sets]),
                },
            ).scalar_one()
    except IntegrityError as exc:
        raise WorkloadExists(f"workload {w.id} already exists") from exc
    return int(wid)


_SUBMIT = text(
    "SELECT queuemgr_submit(:ns, :name, :queue, :priority, :created, :max_runtime,"
    " CAST(:pod_sets AS jsonb))"
)


def cancel_workload(conn: Connection, wid: WorkloadId, *, message: str) -> bool:
    """Finish ``wid`` as Cancelled through ``queuemgr_cancel`` (tenants have no UPDATE).

    False when it had already finished. It frees its placements and notifies.
    """
    ns, _, name = wid.partition("/")
    done = conn.execute(
        text("SELECT queuemgr_cancel(:ns, :name, :why)"), {"ns": ns, "name": name, "why": message}
    ).scalar_one()
    return bool(done)


Status = tuple[WorkloadState, str, str]  # (state, reason, message) as stored


@dataclass(frozen=True, kw_only=True)
class Workloads:
    """The workloads a cycle needs, and the pending reasons last written for them."""

    pending: tuple[Workload, ...]
    admitted: tuple[AdmittedWorkload, ...]
    # (state, reason, message) as stored, for writing only what a cycle changes.
    statuses: Mapping[WorkloadId, Status] = field(default_factory=dict)
    # The stored claims of the pending workloads (claim.workload is the pending object).
    claims: Mapping[WorkloadId, Claim] = field(default_factory=dict)
    # Queued workloads withheld from ``pending`` while they back off: when each is due.
    backing_off: Mapping[WorkloadId, float] = field(default_factory=dict)
    backing_off_workloads: tuple[Workload, ...] = ()  # the same, as workloads
    # Evicted workloads not requeued yet: their pods may still run (Snapshot.stopping).
    stopping: frozenset[WorkloadId] = frozenset()


@dataclass(frozen=True, kw_only=True, slots=True)
class LiveRow:
    """One queued or admitted workload row as read, with the ``version`` it was read at."""

    id: int
    version: int
    state: WorkloadState
    reason: str
    message: str
    workload: Workload
    admitted: AdmittedWorkload | None  # set when state is Admitted
    claim: Claim | None = None  # a queued preemptor's, on ``workload``
    requeue_at: float | None = None  # queued: not pending before then

    def backs_off(self, now: float) -> bool:
        """Whether this queued row is still backing off at ``now``."""
        return self.admitted is None and self.requeue_at is not None and self.requeue_at > now


_COLUMNS = (
    "id, version, namespace, name, local_queue, priority, created_at, max_runtime, "
    "state::text AS state, reason, message, admitted_at, cluster_queue, flavor, borrowing, "
    "claim::text AS claim, evictions, requeue_at"
)
# Two reads, each matching one partial index's predicate exactly, so the cost
# follows the live workloads, never the finished history.
_ALL_LIVE = text(f"""
SELECT {_COLUMNS} FROM workloads WHERE state IN ('Pending', 'Inadmissible')
UNION ALL
SELECT {_COLUMNS} FROM workloads WHERE state = 'Admitted'
ORDER BY id
""")
_LIVE_BY_ID = text(f"""
SELECT {_COLUMNS} FROM workloads
WHERE id = ANY(CAST(:ids AS bigint[])) AND state IN ('Pending', 'Inadmissible', 'Admitted')
ORDER BY id
""")
# JSONB as text: identical vectors (most workloads share a few shapes) are decoded once.
_POD_SETS = text("""
SELECT workload_id, name, count, requests::text, node_selector::text, tolerations::text,
       topology_required, topology_preferred, min_count
FROM pod_sets WHERE workload_id = ANY(CAST(:ids AS bigint[]))
ORDER BY workload_id, position
""")
_PLACEMENTS = text("""
SELECT workload_id, pod_set, node, count FROM placements
WHERE workload_id = ANY(CAST(:ids AS bigint[]))
ORDER BY workload_id, pod_set, node
""")


def read_live(
    conn: Connection,
    ids: Sequence[int] | None = None,
    known: Mapping[int, Workload] | None = None,
) -> list[LiveRow]:
    """The live (queued or admitted) rows among ``ids`` (all of them when None), by id.

    Pod sets never change after submission, so a row whose workload is in
    ``known`` (by row id) keeps that object (a copy, if its eviction count
    moved) and its pod sets are not read.
    """
    known = known or {}
    if ids is None:
        rows = conn.execute(_ALL_LIVE).all()
    elif ids:
        rows = conn.execute(_LIVE_BY_ID, {"ids": list(ids)}).all()
    else:
        return []
    unknown = [r.id for r in rows if r.id not in known]
    pod_sets = _read_pod_sets(conn, unknown) if unknown else {}
    admitted_ids = [r.id for r in rows if r.state == "Admitted"]
    placements: dict[int, list[PodSetPlacement]] = {}
    if admitted_ids:
        for wid, pod_set, node, count in conn.execute(_PLACEMENTS, {"ids": admitted_ids}):
            placements.setdefault(wid, []).append(
                PodSetPlacement(pod_set=pod_set, node=NodeName(node), count=count)
            )
    out: list[LiveRow] = []
    for r in rows:
        w = known.get(r.id)
        if w is None:
            w = Workload(
                namespace=r.namespace,
                name=r.name,
                queue=r.local_queue,
                pod_sets=pod_sets.get(r.id, ()),
                priority=r.priority,
                created_at=codec.seconds(r.created_at),
                max_runtime=r.max_runtime,
                evictions=r.evictions,
            )
        elif w.evictions != r.evictions:
            w = dataclasses.replace(w, evictions=r.evictions)
        state = WorkloadState(r.state)
        admitted = None
        if state is WorkloadState.ADMITTED:
            admission = Admission(
                workload=w.id,
                cluster_queue=ClusterQueueName(r.cluster_queue),
                flavor=FlavorName(r.flavor),
                placements=tuple(placements.get(r.id, ())),
                borrowing=r.borrowing,
            )
            at = codec.seconds(r.admitted_at)
            admitted = AdmittedWorkload(workload=w, admission=admission, admitted_at=at)
        claim = None
        if admitted is None and r.claim is not None:
            claim = codec.claim_of(json.loads(r.claim), w)
        out.append(
            LiveRow(
                id=r.id,
                version=r.version,
                state=state,
                reason=r.reason,
                message=r.message,
                workload=w,
                admitted=admitted,
                claim=claim,
                requeue_at=None if r.requeue_at is None else codec.seconds(r.requeue_at),
            )
        )
    return out


# Served by ix_workloads_evicted: as many rows as victims on their way out.
_STOPPING = text("SELECT namespace, name FROM workloads WHERE state = 'Evicted'")


def read_stopping(conn: Connection) -> frozenset[WorkloadId]:
    """Evicted workloads not requeued yet (whose pods may still run): ``Snapshot.stopping``."""
    return frozenset(WorkloadId(f"{r.namespace}/{r.name}") for r in conn.execute(_STOPPING))


def _read_pod_sets(conn: Connection, ids: list[int]) -> dict[int, tuple[PodSet, ...]]:
    """Pod sets by workload row id; equal pod sets are one shared (immutable) object."""
    decoded: dict[str, Any] = {}
    interned: dict[tuple[Any, ...], PodSet] = {}

    def dec(raw: str) -> Any:
        value = decoded.get(raw)
        if value is None:
            value = decoded[raw] = json.loads(raw)
        return value

    out: dict[int, list[PodSet]] = {}
    for row in conn.execute(_POD_SETS, {"ids": ids}):
        wid, key = row[0], tuple(row[1:])
        ps = interned.get(key)
        if ps is None:
            name, count, requests, selector, tolerations, required, preferred, min_count = key
            ps = interned[key] = PodSet(
                name=name,
                count=count,
                requests=codec.resources(dec(requests)),
                node_selector=dict(dec(selector)),
                tolerations=codec.tolerations_of(dec(tolerations)),
                topology_required=required,
                topology_preferred=preferred,
                min_count=min_count,
            )
        out.setdefault(wid, []).append(ps)
    return {wid: tuple(v) for wid, v in out.items()}


def load_workloads(conn: Connection, *, now: float) -> Workloads:
    """Queued (Pending, Inadmissible) and Admitted workloads, with pod sets and placements.

    A queued workload still backing off at ``now`` is in ``backing_off``, not ``pending``.
    """
    pending: list[Workload] = []
    admitted: list[AdmittedWorkload] = []
    statuses: dict[WorkloadId, tuple[WorkloadState, str, str]] = {}
    claims: dict[WorkloadId, Claim] = {}
    backing_off: dict[WorkloadId, float] = {}
    waiting_out: list[Workload] = []
    for row in read_live(conn):
        if row.admitted is not None:
            admitted.append(row.admitted)
            continue
        wid = row.workload.id
        statuses[wid] = (row.state, row.reason, row.message)
        if row.backs_off(now):
            assert row.requeue_at is not None
            backing_off[wid] = row.requeue_at
            waiting_out.append(row.workload)
            continue
        pending.append(row.workload)
        if row.claim is not None:
            claims[wid] = row.claim
    return Workloads(
        pending=tuple(pending),
        admitted=tuple(admitted),
        statuses=statuses,
        claims=claims,
        backing_off=backing_off,
        backing_off_workloads=tuple(waiting_out),
        stopping=read_stopping(conn),
    )


# One statement per kind of write, whatever the number of workloads: arrays
# unnested into a join. The state condition is what makes admission safe.
_ADMIT = text("""
UPDATE workloads AS w
SET state = 'Admitted', reason = 'Admitted', message = '', state_since = :now,
    admitted_at = :now, cluster_queue = d.cq, flavor = d.flavor, borrowing = d.borrowing,
    claim = NULL, requeue_at = NULL, version = w.version + 1
FROM unnest(CAST(:ns AS text[]), CAST(:names AS text[]), CAST(:cqs AS text[]),
            CAST(:flavors AS text[]), CAST(:borrowing AS boolean[]))
     AS d(ns, name, cq, flavor, borrowing)
WHERE w.namespace = d.ns AND w.name = d.name AND w.state IN ('Pending', 'Inadmissible')
RETURNING w.id, w.namespace, w.name, w.version
""")

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
FROM {rows}
JOIN unnest(CAST(:states AS text[]), CAST(:reasons AS text[]), CAST(:messages AS text[]))
     WITH ORDINALITY AS s(state, reason, message, k) ON s.k = d.which
WHERE {match} AND w.state IN ('Pending', 'Inadmissible')
RETURNING w.namespace, w.name, w.version
"""
_STATUS_BY_NAME = text(
    _SET_STATUS.format(
        rows="unnest(CAST(:ns AS text[]), CAST(:names AS text[]), CAST(:which AS int[])) "
        "AS d(ns, name, which)",
        match="w.namespace = d.ns AND w.name = d.name",
    )
)
_STATUS_BY_ID = text(
    _SET_STATUS.format(
        rows="unnest(CAST(:ids AS bigint[]), CAST(:which AS int[])) AS d(id, which)",
        match="w.id = d.id",
    )
)


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
    messages: bool = True,
    only: Collection[WorkloadId] | None = None,
    ids: Mapping[WorkloadId, int] | None = None,
) -> Persisted:
    """Write one cycle's decisions atomically; StateConflict if any admission lost a race.

    ``previous`` (from :func:`load_workloads`) limits the status writes to the
    workloads whose state, reason or message changed; without it all are written.
    With ``messages=False`` a change of the message alone is not written (its
    numbers move with every admission; the caller refreshes them now and then).
    ``only`` limits the status writes to those workloads (say, the ones no
    cycle has judged yet), so a cycle need not compare every pending one.
    ``ids`` (workload -> row id, when the caller knows them) lets the status
    writes find their rows by primary key and send integers instead of names.
    """
    at = codec.timestamp(now)
    versions: dict[WorkloadId, int] = {}
    with atomic(conn):
        admitted = _admit(conn, decisions.admitted, at, versions)
        statuses = _write_statuses(conn, decisions, at, previous, versions, messages, only, ids)
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
) -> int:
    if not admissions:
        return 0
    adm: list[Admission] = [a.admission for a in admissions]
    ws = [a.workload for a in admissions]
    rows = conn.execute(
        _ADMIT,
        {
            "now": at,
            "ns": [w.namespace for w in ws],
            "names": [w.name for w in ws],
            "cqs": [str(a.cluster_queue) for a in adm],
            "flavors": [str(a.flavor) for a in adm],
            "borrowing": [a.borrowing for a in adm],
        },
    ).all()
    row_ids: dict[str, int] = {}
    for r in rows:
        wid = WorkloadId(f"{r.namespace}/{r.name}")
        row_ids[wid] = r.id
        versions[wid] = r.version
    missing = [w.id for w in ws if w.id not in row_ids]
    if missing or len(rows) != len(ws):
        raise StateConflict("admit", missing)
    placed = [(row_ids[a.workload], p) for a in adm for p in a.placements]
    if placed:
        conn.execute(
            _PLACE,
            {
                "ids": [i for i, _ in placed],
                "pod_sets": [p.pod_set for _, p in placed],
                "nodes": [str(p.node) for _, p in placed],
                "counts": [p.count for _, p in placed],
            },
        )
    return len(rows)


def _write_statuses(
    conn: Connection,
    decisions: Decisions,
    at: object,
    previous: Mapping[WorkloadId, Status] | None,
    versions: dict[WorkloadId, int],
    messages: bool,
    only: Collection[WorkloadId] | None,
    ids: Mapping[WorkloadId, int] | None,
) -> dict[WorkloadId, Status]:
    changed: dict[WorkloadId, Status] = {}
    statuses = decisions.pending
    # Only the verdict is needed (not positions or ETAs), and workloads of one
    # shape share one verdict: put each verdict's words together once.
    words: dict[int, tuple[WorkloadState, str, str]] = {}
    for wid in statuses if only is None else only:
        try:
            verdict = statuses.verdict(wid)
        except KeyError:  # not pending any more (admitted by this cycle)
            continue
        new = words.get(id(verdict))
        if new is None:
            inadmissible = verdict.reason is PendingReason.INADMISSIBLE
            state = WorkloadState.INADMISSIBLE if inadmissible else WorkloadState.PENDING
            new = words[id(verdict)] = (state, verdict.reason.value, verdict.message)
        old = None if previous is None else previous.get(wid)
        if old != new and (messages or old is None or old[:2] != new[:2]):
            changed[wid] = new
    if changed:
        distinct: dict[Status, int] = {}
        which = [distinct.setdefault(st, len(distinct) + 1) for st in changed.values()]
        params: dict[str, object] = {
            "now": at,
            "which": which,
            "states": [st.value for st, _, _ in distinct],
            "reasons": [reason for _, reason, _ in distinct],
            "messages": [message for _, _, message in distinct],
        }
        if ids is not None and all(wid in ids for wid in changed):
            params["ids"] = [ids[wid] for wid in changed]
            rows = conn.execute(_STATUS_BY_ID, params)
        else:
            names = [wid.partition("/") for wid in changed]
            params["ns"] = [ns for ns, _, _ in names]
            params["names"] = [name for _, _, name in names]
            rows = conn.execute(_STATUS_BY_NAME, params)
        for r in rows:
            versions[WorkloadId(f"{r.namespace}/{r.name}")] = r.version
    return changed
