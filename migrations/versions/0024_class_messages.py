"""A class of pending workloads keeps its message once, beside its ETA.

Revision ID: 0024
Revises: 0023

Before this, each pending workload's message was written to its own row. The
message of a class (the workloads of one shape in one ClusterQueue that the
cycle judged as a whole) tells the room its queue has free, so one admission or
one finished run changed it for every workload of the class: a busy cycle wrote
thousands of workload rows to say so. What must stay true after it:

- ``pending_class_etas`` is now ``pending_classes``: per (ClusterQueue, class)
  the ETA and the message of the class. A workload of a class holds an empty
  message in ``workloads``, and readers take its class's (``store.admin``);
- a class's message may name another namespace's workload (the head a StrictFIFO
  queue waits behind, the gang a reservation guards), so a tenant reads only the
  classes in which a workload of its own namespaces waits, as it read that
  message in its own workload's row before. The policy finds such a row by the
  index on ``(cluster_queue, eta_class, namespace)``;
- the ETA stays readable as it was: the tenant's own rows are in its classes.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT = "queuemgr_tenant"
STAFF = "queuemgr_admin, queuemgr_scheduler"

_MY_CLASS = (
    "EXISTS (SELECT 1 FROM public.pending_statuses s "
    "WHERE s.cluster_queue = pending_classes.cluster_queue "
    "AND s.eta_class = pending_classes.class "
    "AND s.namespace IN (SELECT public.queuemgr_namespaces()))"
)


def upgrade() -> None:
    op.rename_table("pending_class_etas", "pending_classes")
    op.execute(
        "ALTER TABLE pending_classes RENAME CONSTRAINT pk_pending_class_etas TO pk_pending_classes"
    )
    op.add_column(
        "pending_classes",
        sa.Column("message", sa.Text(), server_default=sa.text("''"), nullable=False),
    )
    op.create_index(
        "ix_pending_statuses_class",
        "pending_statuses",
        ["cluster_queue", "eta_class", "namespace"],
        postgresql_where=sa.text("eta_class IS NOT NULL"),
    )
    op.execute("ALTER TABLE pending_classes ENABLE ROW LEVEL SECURITY")
    op.execute(f"CREATE POLICY staff ON pending_classes TO {STAFF} USING (true) WITH CHECK (true)")
    op.execute(
        f"CREATE POLICY tenant_reads ON pending_classes FOR SELECT TO {TENANT} USING ({_MY_CLASS})"
    )


def downgrade() -> None:
    op.execute("DROP POLICY tenant_reads ON pending_classes")
    op.execute("DROP POLICY staff ON pending_classes")
    op.execute("ALTER TABLE pending_classes DISABLE ROW LEVEL SECURITY")
    op.drop_index("ix_pending_statuses_class", table_name="pending_statuses")
    op.drop_column("pending_classes", "message")
    op.execute(
        "ALTER TABLE pending_classes RENAME CONSTRAINT pk_pending_classes TO pk_pending_class_etas"
    )
    op.rename_table("pending_classes", "pending_class_etas")
