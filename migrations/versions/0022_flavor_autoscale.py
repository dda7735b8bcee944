"""A ResourceFlavor may declare the nodes an autoscaler can add to it.

Revision ID: 0022
Revises: 0021

``flavors.autoscale`` is ``ResourceFlavor.autoscale``: null (the default and
every existing flavor's value: no node that does not exist counts, the
behaviour before this migration, so no decision changes), or
``{"max_nodes": N, "node": {"allocatable": {resource: int}, "labels": {...}}}``,
the node template. Node fit of a ClusterQueue with an admission check may place
a gang on up to ``max_nodes`` minus the flavor's existing nodes *virtual* nodes
of that template (docs/scheduling.md, "Flavors and node fit"). It is written,
loaded and audited with the flavor's other fields (store.config_objects), and
the mirror's config fingerprint covers it with the rest of the row.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "flavors",
        sa.Column("autoscale", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("flavors", "autoscale")
