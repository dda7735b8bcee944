"""The status board: where every pending workload stands, as the leader's last cycle saw it.

Why it exists: a pending workload's positions and ETA come from a whole
scheduling cycle, and evaluating one to answer ``why`` costs seconds at
100,000 pending. The leader already runs that cycle; it writes here what each
cycle leaves pending (``pending_statuses``, migration 0015) and when
(``status_board``), and ``why`` reads one row, and the rows just ahead of it,
by index.

What must stay true:

- :func:`write_board` runs inside the cycle's own transaction (the caller's
  ``db.write()``): the board never shows an admission that did not commit, nor
  misses one that did;
- it writes only what it is given: the leader sends the rows whose entry
  changed since its last write and the ids of workloads that left the queue, so
  a cycle's writes grow with what changed, not with the backlog;
- an ETA of 0 means "now" (it may start as soon as those ahead of it allow) and
  NULL means unknown or never, so a row does not change merely because time
  passed;
- a tenant's read goes through its row security, or through the tenant views
  when switched (``store.tenant_view``): it never names another namespace's
  workload.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

from queuemgr.core.resources import GPU
from queuemgr.store import codec
from queuemgr.store.arrays import literal

# A row as the leader writes it: (ClusterQueue, position in LocalQueue, in
# ClusterQueue, ETA), the fields of BoardEntry in order; a plain tuple, as
# tens of thousands may be written in one cycle.
Entry = tuple[str | None, int, int, float | None]


@dataclass(frozen=True, kw_only=True, slots=True)
class BoardEntry:
    """One pending workload's place: its ClusterQueue, positions (1-based) and ETA."""

    cluster_queue: str | None
    position_in_local_queue: int
    position_in_queue: int  # in its ClusterQueue; 0 when it routes to none
    eta: float | None  # seconds since the epoch; 0.0 for "now", None for unknown


@dataclass(frozen=True, kw_only=True, slots=True)
class Standing:
    """What the board holds for one workload, and as of when."""

    entry: BoardEntry
    at: datetime
    claimed: bool  # it holds a preemptor's claim (``why`` evaluates those afresh)


@dataclass(frozen=True, kw_only=True, slots=True)
class Running:
    """An admitted workload of a cohort, for "what frees up first"."""

    workload: str
    admitted_at: datetime
    max_runtime: float | None
    gpus: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Ahead:
    workload: str  # namespace/name, or tokens for another tenant's
    position: int
    reason: str
    gpus: int


_UPSERT = text("""
INSERT INTO pending_statuses
    (workload_id, cluster_queue, position_in_local_queue, position_in_queue, eta)
SELECT d.* FROM unnest(CAST(:ids AS bigint[]), CAST(:cqs AS text[]), CAST(:lq AS int[]),
                       CAST(:cq AS int[]), CAST(:etas AS double precision[]))
     AS d(id, cq, lq, pos, eta)
WHERE EXISTS (SELECT 1 FROM workloads w WHERE w.id = d.id)
ON CONFLICT (workload_id) DO UPDATE
SET cluster_queue = excluded.cluster_queue,
    position_in_local_queue = excluded.position_in_local_queue,
    position_in_queue = excluded.position_in_queue, eta = excluded.eta
""")
_DELETE = text("DELETE FROM pending_statuses WHERE workload_id = ANY(CAST(:ids AS bigint[]))")
_STAMP = text("""
INSERT INTO status_board (name, at) VALUES ('leader', :at)
ON CONFLICT (name) DO UPDATE SET at = excluded.at
""")
_READ_ALL = text("""
SELECT workload_id, cluster_queue, position_in_local_queue, position_in_queue, eta
FROM pending_statuses
""")
_READ_ONE = text("""
SELECT s.cluster_queue, s.position_in_local_queue, s.position_in_queue, s.eta, b.at,
       w.claim IS NOT NULL AS claimed
FROM pending_statuses s JOIN workloads w ON w.id = s.workload_id
CROSS JOIN status_board b
WHERE w.namespace = :ns AND w.name = :name AND b.name = 'leader'
""")
_GPUS = f"""(SELECT COALESCE(sum(p.count * COALESCE((p.requests ->> '{GPU}')::bigint, 0)), 0)
        FROM pod_sets p WHERE p.workload_id = w.id)"""
# The nearest ones ahead, by the (cluster_queue, position_in_queue) index.
_AHEAD = text(f"""
SELECT w.namespace, w.name, s.position_in_queue, w.reason, {_GPUS} AS gpus
FROM pending_statuses s JOIN workloads w ON w.id = s.workload_id
WHERE s.cluster_queue = :cq AND s.position_in_queue < :position
ORDER BY s.position_in_queue
LIMIT :limit
""")
# The cohorts of a ClusterQueue's tree: up from its cohort to the root, then every cohort
# under that root. UNION, not UNION ALL: a cycle (which the store refuses) would end.
_TREE = """
WITH RECURSIVE up(name, parent, depth) AS (
    SELECT c.name, c.parent, 0 FROM cohorts c JOIN cluster_queues q ON q.cohort = c.name
    WHERE q.name = :cq
    UNION
    SELECT c.name, c.parent, up.depth + 1 FROM cohorts c JOIN up ON c.name = up.parent
    WHERE up.depth < 64
), down(name) AS (
    SELECT name FROM up WHERE parent IS NULL
    UNION
    SELECT c.name FROM cohorts c JOIN down ON c.parent = down.name
)"""
# The admitted workloads of a ClusterQueue's cohort tree (of the queue alone without
# one), by the index on admitted workloads' ClusterQueue: a loan may come from anywhere
# in the tree, so any of them may free what it waits for.
_RUNNING = text(f"""{_TREE}
SELECT w.namespace, w.name, w.admitted_at, w.max_runtime, {_GPUS} AS gpus
FROM workloads w
WHERE w.state = 'Admitted' AND w.cluster_queue IN (
    SELECT :cq UNION
    SELECT m.name FROM cluster_queues m WHERE m.cohort IN (SELECT name FROM down))
""")


def write_board(
    conn: Connection,
    changed: Mapping[int, Entry],
    gone: Collection[int],
    *,
    now: float,
) -> None:
    """Write the entries that changed (by workload row id), drop those gone, stamp the time."""
    if gone:
        conn.execute(_DELETE, {"ids": literal(list(gone))})
    if changed:
        cqs, lqs, positions, etas = zip(*changed.values(), strict=True)
        conn.execute(
            _UPSERT,
            {
                "ids": literal(list(changed)),
                "cqs": literal(list(cqs)),
                "lq": literal(list(lqs)),
                "cq": literal(list(positions)),
                "etas": literal(list(etas)),
            },
        )
    conn.execute(_STAMP, {"at": codec.timestamp(now)})


def read_board(conn: Connection) -> dict[int, BoardEntry]:
    """Every entry, by workload row id: what a new leader compares its first cycle with."""
    return {
        r.workload_id: BoardEntry(
            cluster_queue=r.cluster_queue,
            position_in_local_queue=r.position_in_local_queue,
            position_in_queue=r.position_in_queue,
            eta=r.eta,
        )
        for r in conn.execute(_READ_ALL)
    }


def standing(conn: Connection, namespace: str, name: str) -> Standing | None:
    """The board's entry for one workload, None if the leader has not judged it."""
    r = conn.execute(_READ_ONE, {"ns": namespace, "name": name}).first()
    if r is None:
        return None
    entry = BoardEntry(
        cluster_queue=r.cluster_queue,
        position_in_local_queue=r.position_in_local_queue,
        position_in_queue=r.position_in_queue,
        eta=r.eta,
    )
    return Standing(entry=entry, at=r.at, claimed=r.claimed)


def ahead(conn: Connection, cluster_queue: str, position: int, *, limit: int) -> list[Ahead]:
    """The first ``limit`` workloads of ``cluster_queue`` before ``position``, in order."""
    rows = conn.execute(_AHEAD, {"cq": cluster_queue, "position": position, "limit": limit})
    return [
        Ahead(
            workload=f"{r.namespace}/{r.name}",
            position=r.position_in_queue,
            reason=r.reason,
            gpus=int(r.gpus),
        )
        for r in rows
    ]


# The root of its cohort tree (its own cohort when that has no parent), and the path
# from the root down to its own cohort: "org/research/team".
_PATH = text(f"{_TREE} SELECT string_agg(name, '/' ORDER BY depth DESC) FROM up")


def running_beside(conn: Connection, cluster_queue: str) -> tuple[str | None, list[Running]]:
    """The root of ``cluster_queue``'s cohort tree, and the admitted workloads of the
    tree (of the queue alone without one)."""
    path, running = tree_and_running(conn, cluster_queue)
    return None if path is None else path.split("/")[0], running


def tree_and_running(conn: Connection, cluster_queue: str) -> tuple[str | None, list[Running]]:
    """The path of ``cluster_queue``'s cohort from its root ("org/research/team"; its
    first name is the root, as cohort names hold no "/"), or None for a queue in no
    cohort; and the admitted workloads of its tree (of the queue alone without one)."""
    return cohort_path(conn, cluster_queue), [
        Running(
            workload=f"{r.namespace}/{r.name}",
            admitted_at=r.admitted_at,
            max_runtime=r.max_runtime,
            gpus=int(r.gpus),
        )
        for r in conn.execute(_RUNNING, {"cq": cluster_queue})
    ]


def cohort_path(conn: Connection, cluster_queue: str) -> str | None:
    """The path of ``cluster_queue``'s cohort from its root ("org/research/team"), or
    None for a queue in no cohort."""
    path = conn.execute(_PATH, {"cq": cluster_queue}).scalar()
    return None if path is None else str(path)
