"""Pod sets remember their topology request and their partial-admission minimum.

Without these columns a workload submitted with ``topology`` or ``min_count``
would lose them on its way through the store and be scheduled differently.

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("pod_sets", sa.Column("topology_required", sa.Text(), nullable=True))
    op.add_column("pod_sets", sa.Column("topology_preferred", sa.Text(), nullable=True))
    op.add_column("pod_sets", sa.Column("min_count", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("pod_sets", "min_count")
    op.drop_column("pod_sets", "topology_preferred")
    op.drop_column("pod_sets", "topology_required")
