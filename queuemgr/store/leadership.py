"""Leader election and write fencing with a lease row only the scheduler role can touch.

Why it exists: exactly one replica may schedule, and no tenant may stop it. The
leader is whoever holds the ``scheduler_lease`` row (migration 0011): its
backend pid and start time, an expiry, and ``epoch``, the fencing token, which
grows by one at every change of holder. Only ``queuemgr_scheduler`` and the
owner may write or lock that row, unlike advisory locks, which any role can
take.

A standby takes the lease when it is free, expired, or held by a backend that
is gone from ``pg_stat_activity`` (its process killed, its network gone, its
backend terminated), so a dead leader is replaced at the standby's next try, as
with a session lock; a live but silent one (paused, partitioned from its
heartbeat) after ``LEASE_TTL``. The holder renews it at every heartbeat.

What must stay true (the fence): a leader that lost the lease must not commit.
Every decision transaction first locks the row ``FOR KEY SHARE`` and checks
that the epoch is its own and that the holder's backend is still alive (pid
plus backend start time, so a recycled pid cannot pass). ``epoch`` is a key
column, so a takeover, which changes it, waits for every such transaction of
the old leader; the heartbeat, which does not, waits for none. Hence an old
leader's decisions either commit before the new leader's first snapshot or
fail the check and roll back; they never interleave.

The lease is per database, so replicas of different databases on one server
never see each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

# A two-int4 advisory key, ("qmgr", 3), serializes schema migrations (migrations/env.py).
# Leadership uses no advisory lock: any role could hold one.
NAMESPACE = 0x716D6772
MIGRATION_KEY = 3
# A holder that has not renewed for this long loses the lease to the next standby.
LEASE_TTL = 15.0
# A decision transaction left idle this long ends its own session (see fence).
FENCED_IDLE_TIMEOUT = 5.0


class NotLeader(RuntimeError):
    """This process's lease is gone: another replica may be scheduling."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaderToken:
    """The lease this process won: its fencing epoch and the backend that holds it."""

    epoch: int
    pid: int
    backend_start: datetime


# The holder's backend is alive. Another role's backends show a NULL start time
# to a non-superuser: then the pid alone keeps the lease until it expires.
_HOLDER_ALIVE = """EXISTS (
  SELECT 1 FROM pg_stat_activity a
  WHERE a.pid = l.holder_pid
    AND (a.backend_start IS NULL OR a.backend_start = l.holder_started))"""

_TAKE = text(f"""
UPDATE scheduler_lease AS l
SET epoch = l.epoch + 1,
    holder_pid = pg_backend_pid(),
    holder_started = (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()),
    replica = :replica,
    expires_at = clock_timestamp() + make_interval(secs => :ttl)
WHERE l.name = 'leader'
  AND (l.holder_pid IS NULL OR l.holder_pid = pg_backend_pid()
       OR l.expires_at < clock_timestamp() OR NOT {_HOLDER_ALIVE})
RETURNING l.epoch, l.holder_pid, l.holder_started
""")


def try_acquire(
    conn: Connection, *, replica: str = "", ttl: float = LEASE_TTL
) -> LeaderToken | None:
    """Try to take the lease for ``conn``'s backend (an autocommit connection kept open).

    Every win is a new epoch, so it returns only once the decision transactions
    of every earlier token have ended, and none of them can commit after.
    """
    row = conn.execute(_TAKE, {"replica": replica, "ttl": ttl}).one_or_none()
    if row is None:
        return None
    return LeaderToken(
        epoch=int(row.epoch), pid=int(row.holder_pid), backend_start=row.holder_started
    )


def renew(conn: Connection, token: LeaderToken, *, ttl: float = LEASE_TTL) -> bool:
    """The heartbeat, on the lease's own connection: whether ``token`` still holds it."""
    row = conn.execute(
        text("""
        UPDATE scheduler_lease SET expires_at = clock_timestamp() + make_interval(secs => :ttl)
        WHERE name = 'leader' AND epoch = :epoch AND holder_pid = pg_backend_pid()
        RETURNING epoch"""),
        {"ttl": ttl, "epoch": token.epoch},
    ).one_or_none()
    return row is not None


def release(conn: Connection) -> None:
    """Give the lease up on ``conn`` now: a standby's next try wins at once.

    Closing the connection frees it too, but only once the server notices the
    disconnect, which a loaded machine can delay past the standby's try.
    """
    conn.execute(
        text("""
        UPDATE scheduler_lease SET holder_pid = NULL, expires_at = '-infinity'
        WHERE name = 'leader' AND holder_pid = pg_backend_pid()""")
    )


# One round trip per decision transaction: the fence also limits how long the
# transaction may then sit idle (SET LOCAL's effect, through set_config's is_local).
_FENCE = text(f"""
SELECT set_config('idle_in_transaction_session_timeout', :idle, true) AS idle_limit,
       l.epoch = :epoch AND l.holder_pid = :pid AND l.holder_started = :started
       AND {_HOLDER_ALIVE} AS held
FROM scheduler_lease AS l WHERE l.name = 'leader'
FOR KEY SHARE
""")
_IDLE = f"{int(FENCED_IDLE_TIMEOUT * 1000)}ms"


def fence(conn: Connection, token: LeaderToken) -> None:
    """Inside a write transaction: raise NotLeader unless ``token`` still holds the lease.

    The transaction then holds the lease row FOR KEY SHARE, which a takeover waits for.
    So that a leader paused before its commit (SIGSTOP, a stalled VM) cannot hold every
    standby off for as long as the pause lasts, the transaction ends its own session once
    it has been idle for ``FENCED_IDLE_TIMEOUT``: the takeover proceeds, and the paused
    leader's writes are rolled back.
    """
    row = conn.execute(
        _FENCE,
        {"epoch": token.epoch, "pid": token.pid, "started": token.backend_start, "idle": _IDLE},
    ).one_or_none()
    held = row is not None and row.held
    if not held:
        raise NotLeader(
            f"the lease of epoch {token.epoch} (backend {token.pid}) is gone; not committing"
        )


def may_lead(conn: Connection) -> str | None:
    """None if this connection's role may hold the lease; else the role's name, for the error."""
    row = conn.execute(
        text("SELECT has_table_privilege('scheduler_lease', 'UPDATE'), current_user")
    ).one()
    return None if row[0] else str(row[1])


def holder_pid(conn: Connection) -> int | None:
    """The backend pid holding the lease in this database, if any (for tests and tools)."""
    pid = conn.execute(
        text("SELECT holder_pid FROM scheduler_lease WHERE name = 'leader'")
    ).scalar()
    return None if pid is None else int(pid)


def record_leader(conn: Connection, *, replica: str, policy: dict[str, object], now: float) -> None:
    """Inside the new leader's first fenced transaction: who leads, with which knobs."""
    conn.execute(
        text("""
        INSERT INTO scheduler_settings (name, replica, policy, elected_at)
        VALUES ('leader', :replica, CAST(:policy AS jsonb), to_timestamp(:now))
        ON CONFLICT (name) DO UPDATE
        SET replica = EXCLUDED.replica, policy = EXCLUDED.policy, elected_at = EXCLUDED.elected_at
        """),
        {"replica": replica, "policy": json.dumps(policy), "now": now},
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaderSettings:
    replica: str
    policy: dict[str, object]
    elected_at: datetime


def leader_settings(conn: Connection) -> LeaderSettings | None:
    """What the last elected leader recorded, if any leader ever ran on this database."""
    row = conn.execute(
        text("SELECT replica, policy, elected_at FROM scheduler_settings WHERE name = 'leader'")
    ).one_or_none()
    if row is None:
        return None
    return LeaderSettings(replica=row.replica, policy=dict(row.policy), elected_at=row.elected_at)
