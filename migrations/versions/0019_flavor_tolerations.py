"""A ResourceFlavor may add tolerations to the pods admitted on it.

Revision ID: 0019
Revises: 0018

``flavors.tolerations`` is ``ResourceFlavor.tolerations`` (Kueue's
``spec.tolerations``): a JSON list of ``{"key", "operator", "value", "effect"}``
objects, ``effect`` null for every effect, spelled as pod sets' tolerations are
(store.codec). What must stay true after it:

- ``[]``, the default and every existing flavor's value, tolerates nothing, which
  is the behaviour before this migration, so no decision changes;
- it is written and audited with the flavor's other fields (store.config_objects),
  and the mirror's config fingerprint covers it with the rest of the row.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "flavors",
        sa.Column(
            "tolerations",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )


def downgrade() -> None:
    op.drop_column("flavors", "tolerations")
