"""Usage samples for the decayed fair share, written by the service's safety cycle.

Why it exists: fair share over time needs a history of what each ClusterQueue
held; the service samples it every few seconds into ``usage_samples``.

What must stay true: one row per (ClusterQueue, resource) per sample, values
in canonical units summed over flavors; queues holding nothing write no row.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, insert

from queuemgr.core.model import ClusterQueueName, FlavorName
from queuemgr.core.resources import ResourceName
from queuemgr.store import codec
from queuemgr.store.models import UsageSample

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
