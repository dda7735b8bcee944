"""Leadership as a lease row that only the scheduler role can lock or change.

Revision ID: 0011
Revises: 0010

Before this, the leader held a session advisory lock and every decision
transaction took a second advisory lock in shared mode. Any role may take any
advisory lock, so a tenant holding the keys kept every ``serve`` in standby or
stalled admission. What must stay true after it:

- ``scheduler_lease`` holds one row, ``leader``. Only ``queuemgr_scheduler``
  (and the owner) may write it; locking a row takes UPDATE privilege, so no one
  else can lock it either. Admins may read it.
- ``epoch`` is the fencing token. It is unique, hence a key column: a takeover
  changes it and so waits for every decision transaction that holds the row
  ``FOR KEY SHARE``; the holder's heartbeat changes only ``expires_at`` and
  waits for none (store/leadership.py).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "scheduler_lease",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("holder_pid", sa.Integer(), nullable=True),
        sa.Column("holder_started", sa.DateTime(timezone=True), nullable=True),
        sa.Column("replica", sa.Text(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_scheduler_lease"),
        sa.UniqueConstraint("epoch", name="uq_scheduler_lease_epoch"),
    )
    op.execute(
        "INSERT INTO scheduler_lease (name, epoch, expires_at) VALUES ('leader', 0, '-infinity')"
    )
    op.execute("GRANT SELECT, UPDATE ON scheduler_lease TO queuemgr_scheduler")
    op.execute("GRANT SELECT ON scheduler_lease TO queuemgr_admin")


def downgrade() -> None:
    op.drop_table("scheduler_lease")
