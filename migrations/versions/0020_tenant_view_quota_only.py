"""The tenant view of pod sets carries ``quota_only`` (migration 0018's column).

Revision ID: 0020
Revises: 0019

Migration 0012's views stand for their tables "with the same columns", but a
view's ``p.*`` is expanded when the view is created: 0018 added
``pod_sets.quota_only`` to the table and not to ``queuemgr_tenant_view.pod_sets``,
so a tenant's ``why``, whose reads go through the views, failed on the column.
What must stay true after it: the view has every column of the table, in the
table's order, and reads the same rows as 0012 defined (a pod set of a
workload the tenant's ``workloads`` view shows); its grant is unchanged.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "queuemgr_tenant_view"
ROWS = f"FROM public.pod_sets p WHERE p.workload_id IN (SELECT id FROM {SCHEMA}.workloads)"


def upgrade() -> None:
    # Columns may be added at the end of a view in place: the grant stays.
    op.execute(
        f"CREATE OR REPLACE VIEW {SCHEMA}.pod_sets WITH (security_barrier) AS SELECT p.* {ROWS}"
    )


def downgrade() -> None:
    names = op.get_bind().execute(
        sa.text(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public'"
            " AND table_name = 'pod_sets' AND column_name <> 'quota_only' ORDER BY ordinal_position"
        )
    )
    columns = ", ".join(f"p.{name}" for (name,) in names)
    op.execute(f"DROP VIEW {SCHEMA}.pod_sets")
    op.execute(f"CREATE VIEW {SCHEMA}.pod_sets WITH (security_barrier) AS SELECT {columns} {ROWS}")
    op.execute(f"GRANT SELECT ON {SCHEMA}.pod_sets TO queuemgr_tenant")
