"""The status board holds each pending workload's rank and ETA class; readers count positions.

Revision ID: 0023
Revises: 0022

Before this, ``pending_statuses`` held each workload's positions, and an
admission at the head of a queue moved the position of every workload behind
it: a deep queue's rows were all rewritten every cycle, a cost that grew with
the backlog and took the service down further the more it fell behind. What
must stay true after it:

- a row holds its workload's ClusterQueue, namespace, LocalQueue, rank and ETA.
  The rank (``store.status_board.rank_key``) is a byte string that sorts the rows
  of one ClusterQueue in the leader's order, and that stays as it is while the
  workloads ahead leave;
- readers count the positions: one plus the rows of its ClusterQueue (of its
  LocalQueue in that ClusterQueue) whose rank is lower, by the two indexes;
- a row's ETA is its own (``eta``, with ``eta_class`` NULL), or that of its class
  (``eta_class``: "<shape id>/<1 if it may borrow, else 0>"), kept once per
  (ClusterQueue, class) in ``pending_class_etas``: a class's ETA moves as runs
  end, and would otherwise rewrite every row of the class. That table names
  ClusterQueues and shapes, no namespace: tenants read it whole, only the
  scheduler and admins write it;
- the rows are emptied here: the board is the leader's cache of its last cycle,
  and the next cycle writes every row again in the new form. The downgrade
  empties them too, for the same reason;
- the tenant view of the rows is made again with the new columns (a view's
  ``s.*`` is fixed when it is made), showing the same rows as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "queuemgr_tenant_view"
TENANT = "queuemgr_tenant"
STAFF = "queuemgr_admin, queuemgr_scheduler"

_VIEW = (
    f"CREATE VIEW {SCHEMA}.pending_statuses WITH (security_barrier) AS "
    "SELECT s.* FROM public.pending_statuses s "
    f"WHERE s.workload_id IN (SELECT id FROM {SCHEMA}.workloads)"
)


def upgrade() -> None:
    op.execute(f"DROP VIEW {SCHEMA}.pending_statuses")
    op.execute("DELETE FROM pending_statuses")
    op.drop_index("ix_pending_statuses_queue", table_name="pending_statuses")
    op.drop_column("pending_statuses", "position_in_local_queue")
    op.drop_column("pending_statuses", "position_in_queue")
    op.add_column("pending_statuses", sa.Column("namespace", sa.Text(), nullable=False))
    op.add_column("pending_statuses", sa.Column("local_queue", sa.Text(), nullable=False))
    op.add_column("pending_statuses", sa.Column("rank", sa.LargeBinary(), nullable=False))
    op.add_column("pending_statuses", sa.Column("eta_class", sa.Text(), nullable=True))
    op.create_table(
        "pending_class_etas",
        sa.Column("cluster_queue", sa.Text(), nullable=False),
        sa.Column("class", sa.Text(), nullable=False),
        sa.Column("eta", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("cluster_queue", "class", name="pk_pending_class_etas"),
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON pending_class_etas TO {STAFF}")
    op.execute(f"GRANT SELECT ON pending_class_etas TO {TENANT}")
    op.create_index("ix_pending_statuses_rank", "pending_statuses", ["cluster_queue", "rank"])
    op.create_index(
        "ix_pending_statuses_local_rank",
        "pending_statuses",
        ["namespace", "local_queue", "rank"],
    )
    op.execute(_VIEW)
    op.execute(f"GRANT SELECT ON {SCHEMA}.pending_statuses TO {TENANT}")


def downgrade() -> None:
    op.execute(f"DROP VIEW {SCHEMA}.pending_statuses")
    op.execute("DELETE FROM pending_statuses")
    op.drop_index("ix_pending_statuses_local_rank", table_name="pending_statuses")
    op.drop_index("ix_pending_statuses_rank", table_name="pending_statuses")
    op.drop_table("pending_class_etas")
    op.drop_column("pending_statuses", "eta_class")
    op.drop_column("pending_statuses", "rank")
    op.drop_column("pending_statuses", "local_queue")
    op.drop_column("pending_statuses", "namespace")
    op.add_column(
        "pending_statuses", sa.Column("position_in_local_queue", sa.Integer(), nullable=False)
    )
    op.add_column("pending_statuses", sa.Column("position_in_queue", sa.Integer(), nullable=False))
    op.create_index(
        "ix_pending_statuses_queue", "pending_statuses", ["cluster_queue", "position_in_queue"]
    )
    op.execute(_VIEW)
    op.execute(f"GRANT SELECT ON {SCHEMA}.pending_statuses TO {TENANT}")
