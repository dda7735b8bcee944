"""Stable preemption: a preemptor's claim, eviction counts and requeue backoff; min_runtime.

Revision ID: 0009
Revises: 0008

``workloads.claim`` is the room a pending preemptor was promised when its
victims were evicted (core.claims), as JSON: ``cluster_queue``, ``flavor``,
``placements`` (``[{pod_set, node, count}]``), ``borrowing``, ``victims``
(workload ids) and ``made_at`` (an ISO-8601 timestamp). It is kept with the
workload so that a new leader holds it as the old one did. ``evictions``
counts the times the workload was preempted; ``requeue_at`` is when its
requeue backoff ends (it is no cycle's pending workload before then).
``cluster_queues.preemption_min_runtime`` is ``PreemptionPolicy.min_runtime``
in seconds. Workloads evicted when this migration runs start with no count.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("workloads", sa.Column("claim", postgresql.JSONB(), nullable=True))
    op.add_column(
        "workloads",
        sa.Column("evictions", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("workloads", sa.Column("requeue_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_workloads_evicted",
        "workloads",
        ["id"],
        postgresql_where=sa.text("state = 'Evicted'"),
    )
    op.add_column(
        "cluster_queues",
        sa.Column(
            "preemption_min_runtime", sa.Double(), server_default=sa.text("0"), nullable=False
        ),
    )


def downgrade() -> None:
    op.drop_column("cluster_queues", "preemption_min_runtime")
    op.drop_index("ix_workloads_evicted", table_name="workloads")
    op.drop_column("workloads", "requeue_at")
    op.drop_column("workloads", "evictions")
    op.drop_column("workloads", "claim")
