"""When an admitted gang first had every pod ready (all-or-nothing readiness).

Revision ID: 0008
Revises: 0007

A new leader reads it to tell a gang that was ready under the old one (never
evicted for readiness again) from one that still is not (timed from its
admission, not from the election). It belongs to the admission it was seen
for only while it is not older than ``admitted_at``. Gangs admitted when this
migration runs are taken as ready: nothing before it recorded the difference,
and an upgrade must not evict a running gang.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "workloads", sa.Column("pods_ready_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.execute("UPDATE workloads SET pods_ready_at = admitted_at WHERE state = 'Admitted'")


def downgrade() -> None:
    op.drop_column("workloads", "pods_ready_at")
