"""Each LocalQueue's decayed usage survives a failover; samples say what was borrowed, for how long.

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "local_queue_usage",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("usage", sa.Double(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", name=op.f("pk_local_queue_usage")),
    )
    op.add_column("usage_samples", sa.Column("borrowed", sa.Numeric(), nullable=True))
    op.add_column(
        "usage_samples",
        sa.Column("period", sa.Double(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("usage_samples", "period")
    op.drop_column("usage_samples", "borrowed")
    op.drop_table("local_queue_usage")
