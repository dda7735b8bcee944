"""A ClusterQueue may borrow only for workloads declaring a short enough runtime.

Revision ID: 0014
Revises: 0013

``cluster_queues.borrowing_max_runtime`` is ``ClusterQueue.borrowing_max_runtime``
in seconds: a workload of the queue goes beyond its nominal quota only if its
declared ``max_runtime`` is at most this. What must stay true after it:

- NULL, the default and every existing queue's value, lets any workload borrow,
  which is the behaviour before this migration.
- It is written and audited with the queue's other fields (store.config).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "cluster_queues", sa.Column("borrowing_max_runtime", sa.Double(), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("cluster_queues", "borrowing_max_runtime")
