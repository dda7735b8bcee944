"""Every pending workload's positions and ETA, kept by the leader as they change.

Revision ID: 0015
Revises: 0014

Before this, ``queuemgr why`` ran a whole scheduling cycle on a freshly loaded
state to tell one workload's position and ETA: seconds at 100,000 pending. The
leader now writes what each cycle leaves pending where it stands, and ``why``
reads it. What must stay true after it:

- ``pending_statuses`` holds one row per workload the leader's last cycle left
  queued: its ClusterQueue, positions and ETA (seconds since the epoch, 0 for
  "now", NULL for unknown). The leader writes only the rows that changed, and
  deletes a row when its workload leaves the queue; a deleted workload takes its
  row with it (ON DELETE CASCADE).
- ``status_board`` (one row) says when the leader last brought them up to date.
- Tenants read their own workloads' rows (row-level security, as for pod sets);
  the tenant view schema (migration 0012) shows the rows of every workload its
  ``workloads`` view shows, so "who is ahead" names other namespaces' by token.
  Only the scheduler and admins write either table.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "queuemgr_tenant_view"
TENANT = "queuemgr_tenant"
STAFF = "queuemgr_admin, queuemgr_scheduler"


def upgrade() -> None:
    op.create_table(
        "pending_statuses",
        sa.Column("workload_id", sa.BigInteger(), nullable=False),
        sa.Column("cluster_queue", sa.Text(), nullable=True),
        sa.Column("position_in_local_queue", sa.Integer(), nullable=False),
        sa.Column("position_in_queue", sa.Integer(), nullable=False),
        sa.Column("eta", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name="fk_pending_statuses_workload_id_workloads",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workload_id", name="pk_pending_statuses"),
    )
    op.create_index(
        "ix_pending_statuses_queue", "pending_statuses", ["cluster_queue", "position_in_queue"]
    )
    op.create_table(
        "status_board",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_status_board"),
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON pending_statuses, status_board TO {STAFF}")
    op.execute(f"GRANT SELECT ON pending_statuses, status_board TO {TENANT}")
    op.execute("ALTER TABLE pending_statuses ENABLE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY staff ON pending_statuses TO {STAFF} USING (true) WITH CHECK (true)")
    op.execute(
        f"CREATE POLICY tenant_reads ON pending_statuses FOR SELECT TO {TENANT} "
        "USING (workload_id IN (SELECT id FROM public.workloads))"
    )
    op.execute(
        f"CREATE VIEW {SCHEMA}.pending_statuses WITH (security_barrier) AS "
        "SELECT s.* FROM public.pending_statuses s "
        f"WHERE s.workload_id IN (SELECT id FROM {SCHEMA}.workloads)"
    )
    op.execute(f"GRANT SELECT ON {SCHEMA}.pending_statuses TO {TENANT}")


def downgrade() -> None:
    op.execute(f"DROP VIEW {SCHEMA}.pending_statuses")
    op.drop_table("status_board")
    op.drop_index("ix_pending_statuses_queue", table_name="pending_statuses")
    op.drop_table("pending_statuses")
