"""ClusterQueues may name admission checks; each check's verdict per workload is kept.

Revision ID: 0021
Revises: 0020

Kueue's two-phase admission: a workload with quota and node fit in a
ClusterQueue that lists admission checks is admitted as a reservation (its
quota and placement held, as every admission's), and its job starts only once
every check says Ready. What must stay true after it:

- ``cluster_queues.admission_checks`` is ``ClusterQueue.admission_checks``, a
  JSON list of check names; ``[]``, the default and every existing queue's
  value, checks nothing, which is the behaviour before this migration. It is
  written and audited with the queue's other fields.
- ``admission_check_states`` holds one row per (workload, check): the admission
  it belongs to (``admitted_at``), the state (Pending, Ready, Retry, Rejected),
  the check's message, the request's attempt, the failures so far and when it
  last changed. A deleted workload takes its rows with it. Only the scheduler
  and admins write it; a tenant reads the rows of its own workloads (row-level
  security, as for pending statuses), so its ``why`` names the check it waits for.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT = "queuemgr_tenant"
STAFF = "queuemgr_admin, queuemgr_scheduler"


def upgrade() -> None:
    op.add_column(
        "cluster_queues",
        sa.Column(
            "admission_checks",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )
    op.create_table(
        "admission_check_states",
        sa.Column("workload_id", sa.BigInteger(), nullable=False),
        sa.Column("check_name", sa.Text(), nullable=False),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state", sa.Text(), server_default=sa.text("'Pending'"), nullable=False),
        sa.Column("message", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("attempt", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("failures", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(
            "state IN ('Pending', 'Ready', 'Retry', 'Rejected')",
            name="ck_admission_check_states_state",
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name="fk_admission_check_states_workload_id_workloads",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workload_id", "check_name", name="pk_admission_check_states"),
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON admission_check_states TO {STAFF}")
    op.execute(f"GRANT SELECT ON admission_check_states TO {TENANT}")
    op.execute("ALTER TABLE admission_check_states ENABLE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY staff ON admission_check_states TO {STAFF} USING (true) WITH CHECK (true)"
    )
    op.execute(
        f"CREATE POLICY tenant_reads ON admission_check_states FOR SELECT TO {TENANT} "
        "USING (workload_id IN (SELECT id FROM public.workloads))"
    )


def downgrade() -> None:
    op.drop_table("admission_check_states")
    op.drop_column("cluster_queues", "admission_checks")
