"""Usage for the decayed fair share: raw samples for history, decayed usage for ordering.

Why it exists: fair share over time needs a history of what each ClusterQueue
held; the service samples it every few seconds into ``usage_samples`` (the
dashboards read it). Ordering by usage needs each LocalQueue's *decayed*
usage, which the leader keeps in memory (``core.fairshare.UsageTracker``) and
saves into ``local_queue_usage`` at every sample, so a new leader starts from
it instead of from nothing.

What must stay true: one sample row per (ClusterQueue, resource) per sample,
values in canonical units summed over flavors; queues holding nothing write no
row. One ``local_queue_usage`` row per LocalQueue, overwritten in place.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert

from queuemgr.core.fairshare import LocalQueueKey
from queuemgr.core.model import ClusterQueueName, FlavorName
from queuemgr.core.resources import ResourceName
from queuemgr.store import codec
from queuemgr.store.models import LocalQueueUsage, UsageSample

Usage = Mapping[ClusterQueueName, Mapping[FlavorName, Mapping[ResourceName, int]]]


def sample_usage(conn: Connection, usage: Usage, *, now: float) -> int:
    """Insert one sample of ``usage``; returns the number of rows written."""
    at = codec.timestamp(now)
    rows: list[dict[str, object]] = []
    for cq, per_flavor in sorted(usage.items()):
        total: dict[str, int] = {}
        for vec in per_flavor.values():
            for res, v in vec.items():
                total[res] = total.get(res, 0) + v
        rows.extend(
            {"at": at, "cluster_queue": cq, "local_queue": None, "resource": r, "value": v}
            for r, v in sorted(total.items())
            if v
        )
    if rows:
        conn.execute(insert(UsageSample), rows)
    return len(rows)


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
