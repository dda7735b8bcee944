"""When a workload last entered the queue: fair sharing takes only runs admitted since.

Revision ID: 0013
Revises: 0012

Before this, a pending workload's only time was its creation, which a victim
keeps when it is queued again (its place in the queue). Fair-sharing preemption
now takes only runs admitted since its preemptor started waiting, and a victim
starts waiting at its eviction. What must stay true after it:

- ``workloads.queued_at`` is the time of the workload's last eviction, NULL
  if it was never evicted (then it waits since ``created_at``). Every eviction
  sets it (store.transitions.evict), in the same UPDATE as the state.
- The tenant view's ``workloads`` (migration 0012) shows it as it is: the cycle a
  tenant's ``why`` runs must decide as the leader's does.
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _tenant_view() -> ModuleType:
    """Migration 0012, whose view definitions this one extends by a column."""
    path = Path(__file__).with_name("0012_tenant_view.py")
    spec = importlib.util.spec_from_file_location("queuemgr_migration_0012", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    op.add_column("workloads", sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True))
    v12 = _tenant_view()
    # A view may gain columns at its end in place; its grants and dependents stay.
    sql = v12._VIEW_SQL["workloads"].replace(
        "w.requeue_at, w.version", "w.requeue_at, w.version, w.queued_at"
    )
    assert "w.queued_at" in sql
    op.execute(f"CREATE OR REPLACE VIEW {v12.SCHEMA}.workloads WITH (security_barrier) AS {sql}")


def downgrade() -> None:
    v12 = _tenant_view()
    # A column cannot leave a view in place: the workloads view and the two that read it
    # are made again as migration 0012 made them.
    dependent = ("placements", "pod_sets", "workloads")
    for view in dependent:
        op.execute(f"DROP VIEW {v12.SCHEMA}.{view}")
    for view in reversed(dependent):
        op.execute(
            f"CREATE VIEW {v12.SCHEMA}.{view} WITH (security_barrier) AS {v12._VIEW_SQL[view]}"
        )
        op.execute(f"GRANT SELECT ON {v12.SCHEMA}.{view} TO {v12.TENANT}")
    op.drop_column("workloads", "queued_at")
