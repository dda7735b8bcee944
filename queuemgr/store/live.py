"""The live workload rows a cycle reads: queued and admitted, with pod sets and placements.

Why it exists: the service's loop is "load, ``schedule``, persist, apply"; this
is the load's reading of rows (``read_live``, for ``mirror``, which every
loader goes through), and ``decisions`` is the persist.

What must stay true: each read matches a partial index's predicate exactly, so
its cost follows the live workloads, never the finished history; a queued row
whose ``requeue_at`` is after the cycle's ``now`` backs off and is no pending
workload of that cycle; pod sets never change after submission, so a known
workload's are not read again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

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
from queuemgr.store import codec
from queuemgr.store.arrays import literal

Status = tuple[WorkloadState, str, str]  # (state, reason, message) as stored
_STATES = {s.value: s for s in WorkloadState}  # a dict lookup: the Enum call is 10x slower


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
    "claim::text AS claim, evictions, requeue_at, queued_at"
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
       topology_required, topology_preferred, min_count, quota_only::text
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
        rows = conn.execute(_LIVE_BY_ID, {"ids": literal(ids)}).all()
    else:
        return []
    # Rows are unpacked by position: reading a Row's columns by name costs about 0.3 µs
    # each, and this loop reads every column of thousands of rows a second.
    unknown = [r[0] for r in rows if r[0] not in known]
    pod_sets = read_pod_sets(conn, unknown) if unknown else {}
    admitted_ids = [r[0] for r in rows if r[8] == "Admitted"]
    placements: dict[int, list[PodSetPlacement]] = {}
    if admitted_ids:
        for wid, pod_set, node, count in conn.execute(
            _PLACEMENTS, {"ids": literal(admitted_ids)}
        ).all():
            placements.setdefault(wid, []).append(
                PodSetPlacement(pod_set=pod_set, node=NodeName(node), count=count)
            )
    out: list[LiveRow] = []
    for (
        rid,
        version,
        namespace,
        name,
        local_queue,
        priority,
        created_at,
        max_runtime,
        state_text,
        reason,
        message,
        admitted_at,
        cluster_queue,
        flavor,
        borrowing,
        claim_text,
        evictions,
        requeue_at,
        queued_at_ts,
    ) in rows:
        w = known.get(rid)
        queued_at = None if queued_at_ts is None else codec.seconds(queued_at_ts)
        if w is None:
            w = Workload(
                namespace=namespace,
                name=name,
                queue=local_queue,
                pod_sets=pod_sets.get(rid, ()),
                priority=priority,
                created_at=codec.seconds(created_at),
                max_runtime=max_runtime,
                evictions=evictions,
                queued_at=queued_at,
            )
        elif w.evictions != evictions or w.queued_at != queued_at:
            w = dataclasses.replace(w, evictions=evictions, queued_at=queued_at)
        state = _STATES[state_text]
        admitted = None
        if state is WorkloadState.ADMITTED:
            admission = Admission(
                workload=w.id,
                cluster_queue=ClusterQueueName(cluster_queue),
                flavor=FlavorName(flavor),
                placements=tuple(placements.get(rid, ())),
                borrowing=borrowing,
            )
            at = codec.seconds(admitted_at)
            admitted = AdmittedWorkload(workload=w, admission=admission, admitted_at=at)
        claim = None
        if admitted is None and claim_text is not None:
            claim = codec.claim_of(json.loads(claim_text), w)
        out.append(
            LiveRow(
                id=rid,
                version=version,
                state=state,
                reason=reason,
                message=message,
                workload=w,
                admitted=admitted,
                claim=claim,
                requeue_at=None if requeue_at is None else codec.seconds(requeue_at),
            )
        )
    return out


# Served by ix_workloads_evicted: as many rows as victims on their way out.
_STOPPING = text("SELECT namespace, name FROM workloads WHERE state = 'Evicted'")


def read_stopping(conn: Connection) -> frozenset[WorkloadId]:
    """Evicted workloads not requeued yet (whose pods may still run): ``Snapshot.stopping``."""
    return frozenset(WorkloadId(f"{r.namespace}/{r.name}") for r in conn.execute(_STOPPING))


def read_pod_sets(conn: Connection, ids: list[int]) -> dict[int, tuple[PodSet, ...]]:
    """Pod sets by workload row id; equal pod sets are one shared (immutable) object."""
    decoded: dict[str, Any] = {}
    interned: dict[tuple[Any, ...], PodSet] = {}

    def dec(raw: str) -> Any:
        value = decoded.get(raw)
        if value is None:
            value = decoded[raw] = json.loads(raw)
        return value

    out: dict[int, list[PodSet]] = {}
    for row in conn.execute(_POD_SETS, {"ids": literal(ids)}).all():  # not row by row
        wid, key = row[0], tuple(row[1:])
        ps = interned.get(key)
        if ps is None:
            name, count, requests, selector, tolerations, required, preferred, min_count, only = key
            ps = interned[key] = PodSet(
                name=name,
                count=count,
                requests=codec.resources(dec(requests)),
                node_selector=dict(dec(selector)),
                tolerations=codec.tolerations_of(dec(tolerations)),
                topology_required=required,
                topology_preferred=preferred,
                min_count=min_count,
                quota_only=codec.resource_names(dec(only)),
            )
        out.setdefault(wid, []).append(ps)
    return {wid: tuple(v) for wid, v in out.items()}
