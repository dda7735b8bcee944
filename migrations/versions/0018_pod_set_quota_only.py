"""A pod set may hold resources charged against quota but not placed on nodes.

Revision ID: 0018
Revises: 0017

``pod_sets.quota_only`` is ``PodSet.quota_only``: a JSON list of resource names
(devices a DRA claim asks for while no node reports them). What must stay true
after it:

- ``[]``, the default and every existing pod set's value, is what every pod set
  meant before, so no decision changes;
- ``queuemgr_submit`` (migration 0010), the one way a workload enters the
  table, stores the list it is given; anything but a JSON array is stored as
  ``[]``. The function is changed in place: its definition is read from the
  database and the two lines naming the columns are extended, so the rest of
  it (grants, checks) stays exactly as 0010 wrote it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SUBMIT = "queuemgr_submit(text, text, text, integer, timestamptz, double precision, jsonb)"
# (as 0010 wrote it, as this migration writes it)
EDITS = (
    (
        "tolerations, topology_required, topology_preferred, min_count)",
        "tolerations, topology_required, topology_preferred, min_count, quota_only)",
    ),
    (
        "(t.p->>'min_count')::integer\n",
        "(t.p->>'min_count')::integer,\n"
        "         coalesce(CASE WHEN jsonb_typeof(t.p->'quota_only') = 'array'"
        " THEN t.p->'quota_only' END, '[]'::jsonb)\n",
    ),
)


def _rewrite(*, undo: bool) -> None:
    """Re-create queuemgr_submit from its stored definition with ``EDITS`` made (or undone)."""
    query = sa.text(f"SELECT pg_get_functiondef('{SUBMIT}'::regprocedure)")
    definition = str(op.get_bind().execute(query).scalar_one())
    for before, after in EDITS:
        old, new = (after, before) if undo else (before, after)
        if definition.count(old) != 1:
            raise RuntimeError(f"queuemgr_submit: expected {old!r} once in its definition")
        definition = definition.replace(old, new)
    op.execute(definition)


def upgrade() -> None:
    op.add_column(
        "pod_sets",
        sa.Column(
            "quota_only",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )
    _rewrite(undo=False)


def downgrade() -> None:
    _rewrite(undo=True)
    op.drop_column("pod_sets", "quota_only")
