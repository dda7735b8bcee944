"""Hierarchical cohorts: a cohort names its parent, and may hold quota of its own.

Revision ID: 0016
Revises: 0015

``cohorts.parent`` is ``Cohort.parent`` (NULL: a root), ``cohorts.weight`` its
fair-sharing weight among its parent's children (an exact fraction as text, as a
ClusterQueue's), and ``cohort_quotas`` its own nominal quota per flavor, with the
borrowing and lending limits that face its parent. What must stay true after it:

- every existing cohort is a root with weight 1 and no quota of its own, which is
  the flat model before this migration, so no decision changes;
- a parent must exist while a child names it (RESTRICT), a cohort never names
  itself, and the store refuses any longer cycle before it writes (store.config_objects);
- the new table has the grants of ``cluster_queue_quotas``: the admin and the
  scheduler read and write it, a tenant reads it (quota is no tenant's secret).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADMIN = "queuemgr_admin"
SCHEDULER = "queuemgr_scheduler"
TENANT = "queuemgr_tenant"
STAFF = f"{ADMIN}, {SCHEDULER}"


def upgrade() -> None:
    op.add_column("cohorts", sa.Column("parent", sa.Text(), nullable=True))
    op.add_column(
        "cohorts", sa.Column("weight", sa.Text(), server_default=sa.text("'1'"), nullable=False)
    )
    op.create_index(op.f("ix_cohorts_parent"), "cohorts", ["parent"], unique=False)
    op.create_foreign_key(
        op.f("fk_cohorts_parent_cohorts"),
        "cohorts",
        "cohorts",
        ["parent"],
        ["name"],
        ondelete="RESTRICT",
    )
    op.create_check_constraint(op.f("ck_cohorts_not_own_parent"), "cohorts", "parent <> name")
    op.create_table(
        "cohort_quotas",
        sa.Column("cohort", sa.Text(), nullable=False),
        sa.Column("flavor", sa.Text(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("nominal", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "borrowing_limit",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "lending_limit",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["cohort"],
            ["cohorts.name"],
            name=op.f("fk_cohort_quotas_cohort_cohorts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["flavor"],
            ["flavors.name"],
            name=op.f("fk_cohort_quotas_flavor_flavors"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("cohort", "flavor", name=op.f("pk_cohort_quotas")),
        sa.UniqueConstraint("cohort", "position", name=op.f("uq_cohort_quotas_cohort_position")),
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON cohort_quotas TO {STAFF}")
    op.execute(f"GRANT SELECT ON cohort_quotas TO {TENANT}")


def downgrade() -> None:
    op.drop_table("cohort_quotas")
    op.drop_constraint(op.f("ck_cohorts_not_own_parent"), "cohorts", type_="check")
    op.drop_constraint(op.f("fk_cohorts_parent_cohorts"), "cohorts", type_="foreignkey")
    op.drop_index(op.f("ix_cohorts_parent"), table_name="cohorts")
    op.drop_column("cohorts", "weight")
    op.drop_column("cohorts", "parent")
