"""Initial schema: configuration, workloads, placements, audit log and usage samples.

Written to match ``queuemgr.store.models`` exactly (a test compares the two
with ``alembic.autogenerate.compare_metadata``), plus what the models cannot
express: the trigger that keeps ``audit_log`` append-only. The downgrade also
drops the ``workload_state`` enum type, which dropping the table leaves behind.

Revision ID: 0001
Revises:
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APPEND_ONLY = """
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP;
END
$$;
CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
"""


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("db_role", sa.Text(), server_default=sa.text("CURRENT_USER"), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("object_kind", sa.Text(), nullable=False),
        sa.Column("object_name", sa.Text(), nullable=False),
        sa.Column("before", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("after", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(
        "ix_audit_log_object", "audit_log", ["object_kind", "object_name", "at"], unique=False
    )
    op.create_table(
        "cohorts",
        sa.Column("name", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_cohorts")),
    )
    op.create_table(
        "flavors",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column(
            "node_labels",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "taints",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_flavors")),
    )
    op.create_table(
        "local_queues",
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("cluster_queue", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", name=op.f("pk_local_queues")),
    )
    op.create_index(
        op.f("ix_local_queues_cluster_queue"), "local_queues", ["cluster_queue"], unique=False
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column(
            "labels",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("allocatable", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "taints",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("schedulable", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column(
            "observed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "usage_samples",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cluster_queue", sa.Text(), nullable=False),
        sa.Column("local_queue", sa.Text(), nullable=True),
        sa.Column("resource", sa.Text(), nullable=False),
        sa.Column("value", sa.Numeric(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_samples")),
    )
    op.create_index(
        "ix_usage_samples_cq_at", "usage_samples", ["cluster_queue", "at"], unique=False
    )
    op.create_table(
        "workloads",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("local_queue", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("max_runtime", sa.Double(), nullable=True),
        sa.Column(
            "state",
            sa.Enum(
                "Pending", "Admitted", "Finished", "Evicted", "Inadmissible", name="workload_state"
            ),
            server_default=sa.text("'Pending'"),
            nullable=False,
        ),
        sa.Column("reason", sa.Text(), server_default=sa.text("'Created'"), nullable=False),
        sa.Column("message", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column(
            "state_since",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cluster_queue", sa.Text(), nullable=True),
        sa.Column("flavor", sa.Text(), nullable=True),
        sa.Column("borrowing", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("namespace", "name", name=op.f("uq_workloads_namespace_name")),
    )
    op.create_index(
        "ix_workloads_admitted",
        "workloads",
        ["cluster_queue"],
        unique=False,
        postgresql_where=sa.text("state = 'Admitted'"),
    )
    op.create_index(
        "ix_workloads_queued",
        "workloads",
        ["namespace", "local_queue", sa.literal_column("priority DESC"), "created_at"],
        unique=False,
        postgresql_where=sa.text("state IN ('Pending', 'Inadmissible')"),
    )
    op.create_table(
        "cluster_queues",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("cohort", sa.Text(), nullable=True),
        sa.Column("weight", sa.Text(), server_default=sa.text("'1'"), nullable=False),
        sa.Column(
            "queueing_strategy",
            sa.Text(),
            server_default=sa.text("'BestEffortFIFO'"),
            nullable=False,
        ),
        sa.Column("namespaces", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "within_cluster_queue", sa.Text(), server_default=sa.text("'Never'"), nullable=False
        ),
        sa.Column(
            "reclaim_within_cohort", sa.Text(), server_default=sa.text("'Never'"), nullable=False
        ),
        sa.Column("stopped", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.ForeignKeyConstraint(
            ["cohort"],
            ["cohorts.name"],
            name=op.f("fk_cluster_queues_cohort_cohorts"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_cluster_queues")),
    )
    op.create_index(op.f("ix_cluster_queues_cohort"), "cluster_queues", ["cohort"], unique=False)
    op.create_table(
        "placements",
        sa.Column("workload_id", sa.BigInteger(), nullable=False),
        sa.Column("pod_set", sa.Text(), nullable=False),
        sa.Column("node", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_placements_workload_id_workloads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workload_id", "pod_set", "node", name=op.f("pk_placements")),
    )
    op.create_index(op.f("ix_placements_node"), "placements", ["node"], unique=False)
    op.create_table(
        "pod_sets",
        sa.Column("workload_id", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("requests", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "node_selector",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "tolerations",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"],
            ["workloads.id"],
            name=op.f("fk_pod_sets_workload_id_workloads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workload_id", "position", name=op.f("pk_pod_sets")),
        sa.UniqueConstraint("workload_id", "name", name=op.f("uq_pod_sets_workload_id_name")),
    )
    op.create_table(
        "cluster_queue_quotas",
        sa.Column("cluster_queue", sa.Text(), nullable=False),
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
            ["cluster_queue"],
            ["cluster_queues.name"],
            name=op.f("fk_cluster_queue_quotas_cluster_queue_cluster_queues"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["flavor"],
            ["flavors.name"],
            name=op.f("fk_cluster_queue_quotas_flavor_flavors"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("cluster_queue", "flavor", name=op.f("pk_cluster_queue_quotas")),
        sa.UniqueConstraint(
            "cluster_queue", "position", name=op.f("uq_cluster_queue_quotas_cluster_queue_position")
        ),
    )
    op.execute(APPEND_ONLY)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log")
    op.execute("DROP FUNCTION IF EXISTS audit_log_append_only()")
    op.drop_table("cluster_queue_quotas")
    op.drop_table("pod_sets")
    op.drop_index(op.f("ix_placements_node"), table_name="placements")
    op.drop_table("placements")
    op.drop_index(op.f("ix_cluster_queues_cohort"), table_name="cluster_queues")
    op.drop_table("cluster_queues")
    op.drop_index(
        "ix_workloads_queued",
        table_name="workloads",
        postgresql_where=sa.text("state IN ('Pending', 'Inadmissible')"),
    )
    op.drop_index(
        "ix_workloads_admitted",
        table_name="workloads",
        postgresql_where=sa.text("state = 'Admitted'"),
    )
    op.drop_table("workloads")
    op.drop_index("ix_usage_samples_cq_at", table_name="usage_samples")
    op.drop_table("usage_samples")
    op.drop_table("nodes")
    op.drop_index(op.f("ix_local_queues_cluster_queue"), table_name="local_queues")
    op.drop_table("local_queues")
    op.drop_table("flavors")
    op.drop_table("cohorts")
    op.drop_index("ix_audit_log_object", table_name="audit_log")
    op.drop_table("audit_log")
    sa.Enum(name="workload_state").drop(op.get_bind(), checkfirst=True)
