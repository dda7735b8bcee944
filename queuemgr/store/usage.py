"""Usage for the decayed fair share: raw samples for history, decayed usage for ordering.

Why it exists: fair share over time needs a history of what each ClusterQueue
held; the service samples it every few seconds into ``usage_samples`` (the
dashboards read it). Ordering by usage needs each LocalQueue's *decayed*
usage, which the leader keeps in memory (``core.fairshare.UsageTracker``) and
saves into ``local_queue_usage`` at every sample, so a new leader starts from
it instead of from nothing.

What must stay true: each sample writes one row per (ClusterQueue, resource)
with ``local_queue`` NULL, the value summed over flavors and what of it is
borrowed (beyond nominal), and one row per (LocalQueue, resource); values are
in canonical units, and ``period`` is the seconds the sample stands for, so
``sum(value * period)`` is resource-seconds. Queues holding nothing write no
row. One ``local_queue_usage`` row per LocalQueue, overwritten in place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, insert, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert

from queuemgr.core.fairshare import LocalQueueKey
from queuemgr.core.model import AdmittedWorkload, ClusterQueueName, FlavorName
from queuemgr.core.resources import GPU, ResourceName, Resources, add, total
from queuemgr.core.snapshot import Config, admitted_requests
from queuemgr.store import codec
from queuemgr.store.models import LocalQueueUsage, UsageSample


def sample_usage(
    conn: Connection,
    config: Config,
    admitted: Iterable[AdmittedWorkload],
    *,
    now: float,
    period: float,
) -> int:
    """Insert one sample of what is held now, standing for ``period`` seconds; returns rows."""
    at = codec.timestamp(now)
    per_cq: dict[ClusterQueueName, dict[FlavorName, dict[ResourceName, int]]] = {}
    per_lq: dict[tuple[ClusterQueueName, str], dict[ResourceName, int]] = {}
    for a in admitted:
        held = admitted_requests(a)
        flavors = per_cq.setdefault(a.admission.cluster_queue, {})
        flavors[a.admission.flavor] = add(flavors.get(a.admission.flavor, {}), held)
        key = (a.admission.cluster_queue, f"{a.workload.namespace}/{a.workload.queue}")
        per_lq[key] = add(per_lq.get(key, {}), held)
    rows: list[dict[str, object]] = []
    for cq, per_flavor in sorted(per_cq.items()):
        borrowed = _borrowed(config, cq, per_flavor)
        for res, v in sorted(total(per_flavor.values()).items()):
            if v:
                rows.append(_row(at, cq, None, res, v, borrowed.get(res, 0), period))
    for (cq, lq), held in sorted(per_lq.items()):
        rows.extend(_row(at, cq, lq, r, v, None, period) for r, v in sorted(held.items()) if v)
    if rows:
        conn.execute(insert(UsageSample), rows)
    return len(rows)


def _row(
    at: datetime, cq: str, lq: str | None, res: str, v: int, borrowed: int | None, period: float
) -> dict[str, object]:
    return {
        "at": at,
        "cluster_queue": cq,
        "local_queue": lq,
        "resource": res,
        "value": v,
        "borrowed": borrowed,
        "period": period,
    }


def _borrowed(
    config: Config, cq: ClusterQueueName, per_flavor: Mapping[FlavorName, Resources]
) -> dict[ResourceName, int]:
    """What ``cq`` holds beyond its nominal quota, per resource, summed over flavors."""
    queue = config.cluster_queues.get(cq)
    nominal = {} if queue is None else {q.flavor: q.nominal for q in queue.flavors}
    out: dict[ResourceName, int] = {}
    for flavor, held in per_flavor.items():
        for res, v in held.items():
            over = v - nominal.get(flavor, {}).get(res, 0)
            if over > 0:
                out[res] = out.get(res, 0) + over
    return out


def save_queue_usage(conn: Connection, usage: Mapping[LocalQueueKey, float], *, now: float) -> None:
    """Overwrite each LocalQueue's decayed usage as of ``now``."""
    if not usage:
        return
    at = codec.timestamp(now)
    stmt = pg_insert(LocalQueueUsage).values(
        [{"namespace": ns, "name": n, "usage": u, "at": at} for (ns, n), u in sorted(usage.items())]
    )
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["namespace", "name"],
            set_={"usage": stmt.excluded.usage, "at": stmt.excluded.at},
        )
    )


def load_queue_usage(conn: Connection) -> dict[LocalQueueKey, tuple[float, float]]:
    """Each LocalQueue's saved decayed usage and when it was saved (epoch seconds)."""
    rows = conn.execute(select(LocalQueueUsage))
    return {(r.namespace, r.name): (r.usage, codec.seconds(r.at)) for r in rows}


@dataclass(frozen=True, kw_only=True)
class UsageLine:
    """One row of ``queuemgr usage``: GPU-hours held, borrowed, and the decayed usage now."""

    name: str
    gpu_hours: float
    borrowed_gpu_hours: float | None  # None where borrowing is not defined (LocalQueues)
    decayed: float


_GROUPS = {
    "cq": ("cluster_queue", "local_queue IS NULL"),
    "lq": ("local_queue", "local_queue IS NOT NULL"),
    "namespace": ("split_part(local_queue, '/', 1)", "local_queue IS NOT NULL"),
}


def usage_report(conn: Connection, *, since: datetime | None, by: str) -> list[UsageLine]:
    """GPU-hours since ``since`` grouped ``by`` cq, lq or namespace, plus decayed usage."""
    key, where = _GROUPS[by]  # fixed SQL fragments chosen by the caller's enum, never input
    rows = conn.execute(
        text(f"""
        SELECT {key} AS name,
               sum(value * period) / 3600.0 AS gpu_hours,
               sum(coalesce(borrowed, 0) * period) / 3600.0 AS borrowed_gpu_hours
        FROM usage_samples
        WHERE resource = :gpu AND {where} AND (CAST(:since AS timestamptz) IS NULL OR at >= :since)
        GROUP BY 1"""),
        {"gpu": GPU, "since": since},
    )
    hours = {r.name: (float(r.gpu_hours), float(r.borrowed_gpu_hours)) for r in rows}
    decayed: dict[str, float] = {}
    lqs = conn.execute(text("SELECT namespace, name, cluster_queue FROM local_queues"))
    routes: dict[str, str] = {f"{r.namespace}/{r.name}": r.cluster_queue for r in lqs}
    for r in conn.execute(select(LocalQueueUsage)):
        lq = f"{r.namespace}/{r.name}"
        name = {"cq": routes.get(lq), "lq": lq, "namespace": r.namespace}[by]
        if name is not None:
            decayed[name] = decayed.get(name, 0.0) + r.usage
    return [
        UsageLine(
            name=name,
            gpu_hours=hours.get(name, (0.0, 0.0))[0],
            borrowed_gpu_hours=hours.get(name, (0.0, 0.0))[1] if by == "cq" else None,
            decayed=decayed.get(name, 0.0),
        )
        for name in sorted(hours.keys() | decayed.keys())
    ]
