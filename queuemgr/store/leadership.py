"""Leader election and write fencing with Postgres advisory locks; no table needed.

Why it exists: exactly one replica may schedule. The leader holds a session
advisory lock on a dedicated connection; Postgres drops it the moment that
connection's backend ends (process killed, network gone, backend terminated).

What must stay true (the fence): a leader that lost its lock must not commit.
Every decision transaction first takes the *fence* lock in shared mode, then
checks that the leader lock is held by the very backend it was granted to (pid
plus backend start time, so a recycled pid cannot pass). A new leader, right
after winning the leader lock, takes the fence lock exclusively once, which
waits for every in-flight decision transaction of the old leader. Hence an old
leader's decisions either commit before the new leader's first snapshot or
fail the check and roll back; they never interleave.

Advisory locks are per database, so replicas of different databases on one
server never see each other's locks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

# Two-int4 advisory keys: ("qmgr", 1) elects the leader, ("qmgr", 2) fences writes,
# ("qmgr", 3) serializes schema migrations (migrations/env.py).
NAMESPACE = 0x716D6772
LEADER_KEY = 1
FENCE_KEY = 2
MIGRATION_KEY = 3


class NotLeader(RuntimeError):
    """This process's leader lock is gone: another replica may be scheduling."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaderToken:
    """Identifies the backend session that won the leader lock."""

    pid: int
    backend_start: datetime


def try_acquire(conn: Connection) -> LeaderToken | None:
    """Try to take the leader lock on ``conn`` (an autocommit connection kept open)."""
    got = conn.execute(
        text("SELECT pg_try_advisory_lock(:ns, :key)"), {"ns": NAMESPACE, "key": LEADER_KEY}
    ).scalar_one()
    if not got:
        return None
    row = conn.execute(
        text("SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()")
    ).one()
    # Wait for the previous leader's in-flight decision transactions to end.
    conn.execute(text("SELECT pg_advisory_lock(:ns, :key)"), {"ns": NAMESPACE, "key": FENCE_KEY})
    conn.execute(text("SELECT pg_advisory_unlock(:ns, :key)"), {"ns": NAMESPACE, "key": FENCE_KEY})
    return LeaderToken(pid=int(row.pid), backend_start=row.backend_start)


def release(conn: Connection) -> None:
    """Give the leader lock up on ``conn`` now: a standby's next try wins at once.

    Closing the connection releases it too, but only once the server notices
    the disconnect, which a loaded machine can delay past the standby's try.
    """
    conn.execute(text("SELECT pg_advisory_unlock(:ns, :key)"), {"ns": NAMESPACE, "key": LEADER_KEY})


_HELD = text("""
SELECT EXISTS (
  SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE l.locktype = 'advisory' AND l.granted
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid = CAST(:ns AS oid) AND l.objid = CAST(:key AS oid) AND l.objsubid = 2
    AND l.pid = :pid AND a.backend_start = :started)
""")


def fence(conn: Connection, token: LeaderToken) -> None:
    """Inside a write transaction: raise NotLeader unless ``token`` still holds the lock."""
    conn.execute(
        text("SELECT pg_advisory_xact_lock_shared(:ns, :key)"),
        {"ns": NAMESPACE, "key": FENCE_KEY},
    )
    held = conn.execute(
        _HELD,
        {"ns": NAMESPACE, "key": LEADER_KEY, "pid": token.pid, "started": token.backend_start},
    ).scalar_one()
    if not held:
        raise NotLeader(f"leader lock of backend {token.pid} is gone; not committing")


def holder_pid(conn: Connection) -> int | None:
    """The backend pid holding the leader lock in this database, if any (for tests and tools)."""
    pid = conn.execute(
        text("""
        SELECT pid FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 2
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid = CAST(:ns AS oid) AND objid = CAST(:key AS oid)"""),
        {"ns": NAMESPACE, "key": LEADER_KEY},
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
