"""Read-only views of the store for a live display, a run's summary and shell completion.

Why it exists: ``queuemgr demo`` redraws its view four times a second from the
database and ends with figures computed from the rows, not from its own
bookkeeping. Every workload (finished ones too) with its GPU count and the
GPUs it holds per node comes from two small queries; what a database already
holds is checked before the demo writes to it. The shell completes workload
and LocalQueue names from here too (``queuemgr completion``).

What must stay true: nothing here writes; workloads and placements are read in
one REPEATABLE READ transaction, so a workload's state and its placements
agree; times are seconds since the epoch; GPUs are counted as the core counts
them (pod count times the per-pod ``nvidia.com/gpu`` request).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection, inspect, text

from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.resources import GPU
from queuemgr.store import codec
from queuemgr.store.handle import Database
from queuemgr.store.models import Base
from queuemgr.store.status_board import class_word

_WORKLOADS = text(f"""
SELECT w.id, w.namespace, w.name, w.local_queue, w.cluster_queue, w.state::text AS state,
       {class_word("reason")} AS reason,
       w.borrowing, w.priority, w.created_at, w.admitted_at, w.finished_at, w.state_since,
       COALESCE((SELECT sum(ps.count * COALESCE((ps.requests ->> :gpu)::bigint, 0))
                 FROM pod_sets ps WHERE ps.workload_id = w.id), 0) AS gpus
FROM workloads w
ORDER BY w.created_at, w.namespace, w.name
""")

_PLACED = text("""
SELECT p.workload_id, p.node,
       sum(p.count * COALESCE((ps.requests ->> :gpu)::bigint, 0)) AS gpus
FROM placements p
JOIN pod_sets ps ON ps.workload_id = p.workload_id AND ps.name = p.pod_set
GROUP BY p.workload_id, p.node
""")


@dataclass(frozen=True, kw_only=True)
class WorkloadProgress:
    namespace: str
    name: str
    local_queue: str
    cluster_queue: str | None  # set on admission, kept afterwards
    state: WorkloadState
    reason: str
    borrowing: bool
    priority: int
    created_at: float
    admitted_at: float | None  # the latest admission
    finished_at: float | None
    state_since: float
    gpus: int  # requested by the whole gang
    nodes: Mapping[str, int] = field(default_factory=dict)  # GPUs held per node now

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


def _seconds(value: object) -> float | None:
    return None if value is None else codec.seconds(value)  # type: ignore[arg-type]


def workload_progress(db: Database) -> list[WorkloadProgress]:
    """Every workload, in submission order, with the GPUs it requests and holds per node."""
    with db.snapshot() as conn:
        rows = conn.execute(_WORKLOADS, {"gpu": GPU}).mappings().all()
        placed: dict[int, dict[str, int]] = {}
        for p in conn.execute(_PLACED, {"gpu": GPU}):
            placed.setdefault(p.workload_id, {})[p.node] = int(p.gpus)
    return [
        WorkloadProgress(
            namespace=r["namespace"],
            name=r["name"],
            local_queue=r["local_queue"],
            cluster_queue=r["cluster_queue"],
            state=WorkloadState(r["state"]),
            reason=r["reason"],
            borrowing=r["borrowing"],
            priority=r["priority"],
            created_at=codec.seconds(r["created_at"]),
            admitted_at=_seconds(r["admitted_at"]),
            finished_at=_seconds(r["finished_at"]),
            state_since=codec.seconds(r["state_since"]),
            gpus=int(r["gpus"]),
            nodes=placed.get(r["id"], {}),
        )
        for r in rows
    ]


@dataclass(frozen=True, kw_only=True)
class Occupancy:
    """What a database holds besides an empty queuemgr schema."""

    foreign_tables: tuple[str, ...]  # tables that are not queuemgr's
    tables_with_rows: tuple[str, ...]  # queuemgr tables that are not empty

    @property
    def empty(self) -> bool:
        return not self.foreign_tables and not self.tables_with_rows


# Rows an empty schema holds already: the lease row, seeded by its migration, counts
# only once a leader has held it.
_HELD = {"scheduler_lease": "epoch > 0"}


def require_schema(conn: Connection) -> None:
    """Read nothing from ``workloads``: fails (a StoreError on the way out) where it is missing."""
    conn.execute(text("SELECT 1 FROM workloads LIMIT 0"))


def occupancy(conn: Connection) -> Occupancy:
    """The tables of the connection's default schema that hold something."""
    ours = set(Base.metadata.tables)
    names = sorted(inspect(conn).get_table_names())
    foreign = tuple(n for n in names if n not in ours and n != "alembic_version")
    with_rows = tuple(
        n
        for n in names
        if n in ours
        and conn.execute(
            text(f'SELECT EXISTS (SELECT 1 FROM "{n}" WHERE {_HELD.get(n, "true")})')
        ).scalar()
    )
    return Occupancy(foreign_tables=foreign, tables_with_rows=with_rows)


# A shell shows what it completes: a few hundred names are more than anyone reads.
COMPLETIONS = 200


def workload_names(conn: Connection, namespace: str, prefix: str) -> list[str]:
    """Names of the unfinished workloads of ``namespace`` starting with ``prefix``, sorted."""
    rows = conn.execute(
        text(
            "SELECT name FROM workloads WHERE namespace = :ns AND starts_with(name, :prefix) "
            "AND state <> 'Finished' ORDER BY name LIMIT :limit"
        ),
        {"ns": namespace, "prefix": prefix, "limit": COMPLETIONS},
    )
    return [str(r[0]) for r in rows]


def local_queue_names(conn: Connection, namespace: str, prefix: str) -> list[str]:
    """Names of the LocalQueues of ``namespace`` starting with ``prefix``, sorted."""
    rows = conn.execute(
        text(
            "SELECT name FROM local_queues WHERE namespace = :ns AND starts_with(name, :prefix) "
            "ORDER BY name"
        ),
        {"ns": namespace, "prefix": prefix},
    )
    return [str(r[0]) for r in rows]
