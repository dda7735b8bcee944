"""A class of pending workloads keeps its reason too, beside its ETA and message.

Revision ID: 0025
Revises: 0024

Migration 0024 kept a class's message once; its reason was still written to every
workload of the class. A reason moves for a whole class at once (QuotaExceeded
becomes CohortExhausted when a neighbour borrows the last of the cohort), and a
new leader's first cycle at a deep backlog wrote every waiting workload's first
reason over the one it was created with: 80,000 rows of a 100,000 backlog. What
must stay true after it:

- ``pending_classes.reason`` is the reason of every workload of the class. A
  workload of a class keeps in ``workloads`` whatever reason it last had (its
  state is still its own), and readers take its class's while it is queued and
  on the board (``store.status_board.class_word``);
- the rows written before this migration have no reason (NULL): readers then take
  the workload's own, which was written with them; the leader's next cycle fills
  it in.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("pending_classes", sa.Column("reason", sa.Text(), nullable=True))


def downgrade() -> None:
    # Readers then take each workload's own reason, which a class's workloads may hold
    # stale until the older leader's first cycle: it compares the reasons it reads with
    # its verdicts, and writes every one that differs.
    op.drop_column("pending_classes", "reason")
