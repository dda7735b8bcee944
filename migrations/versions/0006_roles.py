"""Database roles: only queuemgr_admin may change queues and quotas.

Revision ID: 0006
Revises: 0005

Roles are global to the Postgres server, so they are created only when missing
(concurrent migrations of other databases may race to create them) and never
dropped on downgrade: another database may use them. Grants are per database.
Every later migration that adds a table grants on it here-style (a test checks
that both roles hold the privileges below on every table).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ADMIN = "queuemgr_admin"
TENANT = "queuemgr_tenant"
TABLES = (
    "flavors",
    "nodes",
    "cohorts",
    "cluster_queues",
    "cluster_queue_quotas",
    "local_queues",
    "workloads",
    "pod_sets",
    "placements",
    "audit_log",
    "usage_samples",
    "local_queue_usage",
    "scheduler_settings",
)
# Tenants read queues and workloads, submit (workloads and their pod sets) and cancel
# (a workload finishes and its placements are freed); nothing else.
TENANT_GRANTS = {
    "SELECT": tuple(t for t in TABLES if t != "audit_log"),
    "INSERT": ("workloads", "pod_sets"),
    "UPDATE": ("workloads",),
    "DELETE": ("placements",),
}


def _create_role(name: str) -> None:
    op.execute(f"""
        DO $$ BEGIN
          CREATE ROLE {name} NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$""")


def upgrade() -> None:
    for role in (ADMIN, TENANT):
        _create_role(role)
        op.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
    tables = ", ".join(TABLES)
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {ADMIN}")
    for privilege, names in TENANT_GRANTS.items():
        op.execute(f"GRANT {privilege} ON {', '.join(names)} TO {TENANT}")


def downgrade() -> None:
    tables = ", ".join(TABLES)
    for role in (ADMIN, TENANT):
        op.execute(f"REVOKE ALL ON {tables} FROM {role}")
        op.execute(f"REVOKE USAGE ON SCHEMA public FROM {role}")
