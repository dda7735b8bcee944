"""The status board: where every pending workload stands, as the leader's last cycle saw it.

Why it exists: a pending workload's positions and ETA come from a whole
scheduling cycle, and evaluating one to answer ``why`` costs seconds at
100,000 pending. The leader already runs that cycle; it writes here what each
cycle leaves pending (``pending_statuses``, migrations 0015 and 0023) and when
(``status_board``), and ``why`` reads one row, and the first rows ahead of it,
by index.

A row holds its workload's *rank*, not its positions: a key that sorts its
ClusterQueue in the cycle's order, and that does not change when the workloads
ahead of it leave. An admission would otherwise move every position behind it,
and a deep queue would be rewritten whole each cycle. The positions are counted
when read, over the rows of the same ClusterQueue (and LocalQueue) that rank
before it, by index.

What must stay true:

- :func:`write_board` runs inside the cycle's own transaction (the caller's
  ``db.write()``): the board never shows an admission that did not commit, nor
  misses one that did;
- it writes only what it is given: the leader sends the rows whose entry
  changed since its last write and the ids of workloads that left the queue, so
  a cycle's writes grow with what changed, not with the backlog;
- within one ClusterQueue every row's rank has the same form (:func:`rank_key`):
  the queue order's key (priority, creation, id) when the queue is in queue
  order, which a workload keeps while it waits; its position otherwise (a queue
  ordered by usage, the unroutable ones), rewritten when it moves;
- a row's ETA is its own, or, for a row of a class that the cycle judged as a
  whole (its shape, whether it may borrow), the class's, kept once per
  (ClusterQueue, class) in ``pending_classes`` with the class's reason and
  message: when runs end and that ETA moves, or the room free changes the
  message, or the reason moves, one row is written, not the queue (the class's
  workloads hold an empty message of their own and whatever reason they last
  had; every reader shows a queued workload's words through
  :func:`class_word`);
- an ETA of 0 means "now" (it may start as soon as those ahead of it allow) and
  NULL means unknown or never, so a row does not change merely because time
  passed;
- a tenant's read goes through its row security, or through the tenant views
  when switched (``store.tenant_view``): it never names another namespace's
  workload. The tenant view shows every live workload's row (others' by token),
  so positions counted there count everyone, as the leader's cycle did.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

from queuemgr.core.resources import GPU
from queuemgr.core.shapes import ShapeId
from queuemgr.core.standings import EtaClass, RowRank
from queuemgr.store import codec
from queuemgr.store.arrays import literal

# A row as the leader writes it: (ClusterQueue, (namespace, LocalQueue), rank,
# its own ETA, the class whose ETA it has instead); a plain tuple, as tens of
# thousands may be compared in one cycle. The ETA is None when a class is named.
Entry = tuple[str | None, tuple[str, str], RowRank, float | None, EtaClass | None]
# A class's ETA and message are kept per (ClusterQueue, class).
ClassKey = tuple[str, EtaClass]
# (ETA, reason, message); a reason written before migration 0025 reads as None.
ClassEntry = tuple[float | None, str | None, str]


def class_name(klass: EtaClass) -> str:
    """How a class is stored: "<shape id>/<1 if it may borrow, else 0>"."""
    return f"{klass[0]}/{int(klass[1])}"


def class_of(name: str) -> EtaClass:
    shape, _, borrow = name.partition("/")
    return (ShapeId(int(shape)), borrow == "1")


_INT64 = 1 << 63
_MASK64 = (1 << 64) - 1


def rank_key(rank: RowRank) -> bytes:
    """``rank`` as bytes that sort as it does (Postgres compares bytea bytewise).

    A position (an int) is 0x00 and 8 bytes; a queue-order key (minus the
    priority, creation time, id) is 0x01, the priority's 8 bytes (offset so that
    it sorts as a signed number, clamped to 64 bits), the time's 8 bytes (the
    IEEE bits, sign flipped, the rest too for a negative number: they then sort
    as the numbers do), and the id in UTF-8, whose bytes sort as its characters.
    """
    if isinstance(rank, int):
        return b"\x00" + min(max(rank, 0), _MASK64).to_bytes(8, "big")
    neg_priority, created, wid = rank
    bits = int.from_bytes(struct.pack(">d", created + 0.0), "big")  # + 0.0: no -0.0
    bits = (~bits & _MASK64) if bits >> 63 else bits | _INT64
    priority = min(max(neg_priority, -_INT64), _INT64 - 1) + _INT64
    return b"\x01" + priority.to_bytes(8, "big") + bits.to_bytes(8, "big") + wid.encode()


def rank_of(key: bytes) -> RowRank:
    """The rank that :func:`rank_key` made ``key`` from (a clamped one clamped)."""
    if key[:1] == b"\x00":
        return int.from_bytes(key[1:9], "big")
    priority = int.from_bytes(key[1:9], "big") - _INT64
    bits = int.from_bytes(key[9:17], "big")
    bits = (bits & ~_INT64) if bits >> 63 else ~bits & _MASK64
    created: float = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    return (priority, created, key[17:].decode())


@dataclass(frozen=True, kw_only=True, slots=True)
class BoardEntry:
    """One pending workload's place: its ClusterQueue, positions (1-based) and ETA."""

    cluster_queue: str | None
    position_in_local_queue: int
    position_in_queue: int  # in its ClusterQueue; 0 when it routes to none
    eta: float | None  # seconds since the epoch; 0.0 for "now", None for unknown
    rank: bytes  # :func:`rank_key`: where it sorts in its ClusterQueue


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


def class_word(column: str, workload: str = "w") -> str:
    """SQL for a workload's ``reason`` or ``message`` as readers show it.

    A queued workload on the board in a class has its class's (the leader writes a
    class's words once, and its workloads' own rows do not follow them); any other has
    its own, as has one whose class row has no reason yet (written before migration
    0025). ``workload`` is the alias of the ``workloads`` row in the caller's query.
    """
    if column not in ("reason", "message"):
        raise ValueError(f"class_word: no class column {column!r}")
    w = workload
    return f"""CASE WHEN {w}.state IN ('Pending', 'Inadmissible') THEN COALESCE(
        (SELECT c.{column} FROM pending_statuses s JOIN pending_classes c
           ON c.cluster_queue = s.cluster_queue AND c.class = s.eta_class
         WHERE s.workload_id = {w}.id), {w}.{column})
    ELSE {w}.{column} END"""


_UPSERT = text("""
INSERT INTO pending_statuses
    (workload_id, cluster_queue, namespace, local_queue, rank, eta, eta_class)
SELECT d.id, d.cq, d.ns, d.lq, decode(d.rank, 'hex'), d.eta, d.class
FROM unnest(CAST(:ids AS bigint[]), CAST(:cqs AS text[]), CAST(:nss AS text[]),
            CAST(:lqs AS text[]), CAST(:ranks AS text[]), CAST(:etas AS double precision[]),
            CAST(:classes AS text[]))
     AS d(id, cq, ns, lq, rank, eta, class)
WHERE EXISTS (SELECT 1 FROM workloads w WHERE w.id = d.id)
ON CONFLICT (workload_id) DO UPDATE
SET cluster_queue = excluded.cluster_queue, namespace = excluded.namespace,
    local_queue = excluded.local_queue, rank = excluded.rank, eta = excluded.eta,
    eta_class = excluded.eta_class
""")
_DELETE = text("DELETE FROM pending_statuses WHERE workload_id = ANY(CAST(:ids AS bigint[]))")
_CLASS_UPSERT = text("""
INSERT INTO pending_classes (cluster_queue, class, eta, reason, message)
SELECT * FROM unnest(CAST(:cqs AS text[]), CAST(:classes AS text[]),
                     CAST(:etas AS double precision[]), CAST(:reasons AS text[]),
                     CAST(:messages AS text[]))
ON CONFLICT (cluster_queue, class) DO UPDATE
SET eta = excluded.eta, reason = excluded.reason, message = excluded.message
""")
_CLASS_DELETE = text("""
DELETE FROM pending_classes
WHERE (cluster_queue, class) IN (
    SELECT * FROM unnest(CAST(:cqs AS text[]), CAST(:classes AS text[])))
""")
_READ_CLASSES = text("SELECT cluster_queue, class, eta, reason, message FROM pending_classes")
_STAMP = text("""
INSERT INTO status_board (name, at) VALUES ('leader', :at)
ON CONFLICT (name) DO UPDATE SET at = excluded.at
""")
_READ_ALL = text("""
SELECT workload_id, cluster_queue, namespace, local_queue, rank, eta, eta_class
FROM pending_statuses
""")
# Positions are counted over the rows ranked before it, each count by an index.
_READ_ONE = text("""
SELECT s.cluster_queue, s.rank, b.at, w.claim IS NOT NULL AS claimed,
       CASE WHEN s.eta_class IS NULL THEN s.eta
            ELSE (SELECT c.eta FROM pending_classes c
                  WHERE c.cluster_queue = s.cluster_queue AND c.class = s.eta_class) END
           AS eta,
       1 + (SELECT count(*) FROM pending_statuses o
            WHERE o.namespace = s.namespace AND o.local_queue = s.local_queue
              AND o.rank < s.rank
              AND o.cluster_queue IS NOT DISTINCT FROM s.cluster_queue) AS in_local_queue,
       CASE WHEN s.cluster_queue IS NULL THEN 0
            ELSE 1 + (SELECT count(*) FROM pending_statuses o
                      WHERE o.cluster_queue = s.cluster_queue AND o.rank < s.rank) END
           AS in_queue
FROM pending_statuses s JOIN workloads w ON w.id = s.workload_id
CROSS JOIN status_board b
WHERE w.namespace = :ns AND w.name = :name AND b.name = 'leader'
""")
_GPUS = f"""(SELECT COALESCE(sum(p.count * COALESCE((p.requests ->> '{GPU}')::bigint, 0)), 0)
        FROM pod_sets p WHERE p.workload_id = w.id)"""
# The first ones of the queue ahead of a rank, by the (cluster_queue, rank) index.
_AHEAD = text(f"""
SELECT w.namespace, w.name, {class_word("reason")} AS reason, {_GPUS} AS gpus
FROM pending_statuses s JOIN workloads w ON w.id = s.workload_id
WHERE s.cluster_queue = :cq AND s.rank < :rank
ORDER BY s.rank
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
    classes: Mapping[ClassKey, ClassEntry],
    classes_gone: Collection[ClassKey],
    now: float,
) -> None:
    """Write the entries (by workload row id) and classes (ETA, reason, message) that
    changed, drop those gone, stamp the time."""
    if gone:
        conn.execute(_DELETE, {"ids": literal(list(gone))})
    if classes_gone:
        conn.execute(
            _CLASS_DELETE,
            {
                "cqs": literal([cq for cq, _ in classes_gone]),
                "classes": literal([class_name(k) for _, k in classes_gone]),
            },
        )
    if classes:
        conn.execute(
            _CLASS_UPSERT,
            {
                "cqs": literal([cq for cq, _ in classes]),
                "classes": literal([class_name(k) for _, k in classes]),
                "etas": literal([eta for eta, _, _ in classes.values()]),
                "reasons": literal([reason for _, reason, _ in classes.values()]),
                "messages": literal([message for _, _, message in classes.values()]),
            },
        )
    if changed:
        cqs, lqs, ranks, etas, klasses = zip(*changed.values(), strict=True)
        conn.execute(
            _UPSERT,
            {
                "ids": literal(list(changed)),
                "cqs": literal(list(cqs)),
                "nss": literal([ns for ns, _ in lqs]),
                "lqs": literal([lq for _, lq in lqs]),
                "ranks": literal([rank_key(r).hex() for r in ranks]),
                "etas": literal(list(etas)),
                "classes": literal([None if k is None else class_name(k) for k in klasses]),
            },
        )
    conn.execute(_STAMP, {"at": codec.timestamp(now)})


def read_board(conn: Connection) -> tuple[dict[int, Entry], dict[ClassKey, ClassEntry]]:
    """Every entry, by workload row id, and every class's ETA, reason and message: what
    a new leader compares its first cycle with (a reason of before migration 0025 reads
    as None, and so differs from any)."""
    rows: dict[int, Entry] = {
        wid: (cq, (ns, lq), rank_of(bytes(rank)), eta, None if k is None else class_of(k))
        for wid, cq, ns, lq, rank, eta, k in conn.execute(_READ_ALL)
    }
    classes = {
        (cq, class_of(k)): (eta, reason, message)
        for cq, k, eta, reason, message in conn.execute(_READ_CLASSES)
    }
    return rows, classes


def standing(conn: Connection, namespace: str, name: str) -> Standing | None:
    """The board's entry for one workload, None if the leader has not judged it."""
    r = conn.execute(_READ_ONE, {"ns": namespace, "name": name}).first()
    if r is None:
        return None
    entry = BoardEntry(
        cluster_queue=r.cluster_queue,
        position_in_local_queue=r.in_local_queue,
        position_in_queue=r.in_queue,
        eta=r.eta,
        rank=bytes(r.rank),
    )
    return Standing(entry=entry, at=r.at, claimed=r.claimed)


def ahead(conn: Connection, cluster_queue: str, rank: bytes, *, limit: int) -> list[Ahead]:
    """The first ``limit`` workloads of ``cluster_queue`` ranked before ``rank``, in order."""
    rows = conn.execute(_AHEAD, {"cq": cluster_queue, "rank": rank, "limit": limit})
    return [
        Ahead(
            workload=f"{r.namespace}/{r.name}",
            position=i,
            reason=r.reason,
            gpus=int(r.gpus),
        )
        for i, r in enumerate(rows, start=1)
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
