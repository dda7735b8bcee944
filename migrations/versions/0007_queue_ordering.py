"""ClusterQueues and cohorts may choose their own ordering (fifo or usage).

Revision ID: 0007
Revises: 0006

NULL means "not set here": a ClusterQueue falls back to its cohort's ordering,
and a cohort to the scheduler's global ``ordering`` knob.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("cohorts", sa.Column("ordering", sa.Text(), nullable=True))
    op.add_column("cluster_queues", sa.Column("ordering", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("cluster_queues", "ordering")
    op.drop_column("cohorts", "ordering")
