"""A ClusterQueue may count a resource in another's units in its dominant share.

Revision ID: 0017
Revises: 0016

``cluster_queues.resource_weights`` is ``ClusterQueue.resource_weights``: a JSON list
of ``{"resource", "numerator", "denominator", "counts_as"}`` objects, the two terms
JSON integers (exact, as every quantity of the store). What must stay true after it:

- ``[]``, the default and every existing queue's value, weights nothing, which is
  the behaviour before this migration, so no decision changes;
- it is written and audited with the queue's other fields (store.config_objects),
  and the mirror's config fingerprint covers it with the rest of the row.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "cluster_queues",
        sa.Column(
            "resource_weights",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )


def downgrade() -> None:
    op.drop_column("cluster_queues", "resource_weights")
