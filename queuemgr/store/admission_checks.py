"""Each admission check's verdict on a workload's reservation (migration 0021).

Why it exists: a workload admitted to a ClusterQueue that lists admission
checks holds its quota and placement (its reservation) but its job starts only
once every check is Ready (Kueue's two-phase admission). The verdicts are
written by the controller's check workers, read by the Kubernetes backend
before it starts a job, and by ``why``. They live beside the workload row, not
in it: a check's progress leaves ``workloads.version`` (and so the leader's
mirror) alone.

What must stay true: a state belongs to one admission (``admitted_at``, to the
millisecond, as ``job_rows.mark_pods_ready`` matches it); a state of an earlier
admission is no verdict on the current one, and :func:`reserve` starts it over
as Pending (the next attempt) while keeping the failures counted, so a
requeue's backoff keeps growing. Writers fence their transactions themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from queuemgr.core.model import WorkloadId
from queuemgr.store import codec


class CheckState(enum.StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    RETRY = "Retry"  # failed this admission: the reservation is released, tried again later
    REJECTED = "Rejected"  # failed for good


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckStatus:
    check: str
    state: CheckState
    message: str
    admitted_at: float
    attempt: int
    failures: int
    updated_at: float

    def of_admission(self, admitted_at: float | None) -> bool:
        """Whether this verdict is on the admission made at ``admitted_at``."""
        return admitted_at is not None and abs(self.admitted_at - admitted_at) <= 0.001


_SELECT = """
SELECT w.namespace, w.name, c.check_name, c.state, c.message, c.admitted_at, c.attempt,
       c.failures, c.updated_at
FROM admission_check_states c JOIN workloads w ON w.id = c.workload_id
"""


def _status(r: Any) -> CheckStatus:
    return CheckStatus(
        check=r.check_name,
        state=CheckState(r.state),
        message=r.message,
        admitted_at=codec.seconds(r.admitted_at),
        attempt=r.attempt,
        failures=r.failures,
        updated_at=codec.seconds(r.updated_at),
    )


def check_states(
    conn: Connection, wids: Sequence[str] | None = None
) -> dict[WorkloadId, dict[str, CheckStatus]]:
    """The check states of these workloads (``namespace/name``), or of every unfinished one."""
    if wids is None:
        rows = conn.execute(text(_SELECT + " WHERE w.state <> 'Finished'"))
    elif not wids:
        return {}
    else:
        parts = [w.partition("/") for w in wids]
        rows = conn.execute(
            text(
                _SELECT + " JOIN unnest(CAST(:ns AS text[]), CAST(:names AS text[])) AS d(ns, name)"
                " ON w.namespace = d.ns AND w.name = d.name"
            ),
            {"ns": [p[0] for p in parts], "names": [p[2] for p in parts]},
        )
    out: dict[WorkloadId, dict[str, CheckStatus]] = {}
    for r in rows:
        out.setdefault(WorkloadId(f"{r.namespace}/{r.name}"), {})[r.check_name] = _status(r)
    return out


def reserve(
    conn: Connection, wid: str, checks: Sequence[str], *, admitted_at: float, now: float
) -> dict[str, CheckStatus]:
    """Make sure each check has a state for this admission: a new one Pending (attempt
    1), one of an earlier admission Pending again (its next attempt, failures kept).
    Returns the states of this admission, by check."""
    namespace, _, name = wid.partition("/")
    conn.execute(
        text("""
INSERT INTO admission_check_states AS c (workload_id, check_name, admitted_at, state, updated_at)
SELECT w.id, d.check_name, :at, 'Pending', :now
FROM workloads w, unnest(CAST(:checks AS text[])) AS d(check_name)
WHERE w.namespace = :ns AND w.name = :name
ON CONFLICT (workload_id, check_name) DO UPDATE
SET admitted_at = EXCLUDED.admitted_at, state = 'Pending', message = '',
    attempt = c.attempt + 1, updated_at = EXCLUDED.updated_at
WHERE c.admitted_at NOT BETWEEN EXCLUDED.admitted_at - interval '1 ms'
                            AND EXCLUDED.admitted_at + interval '1 ms'
"""),
        {
            "at": codec.timestamp(admitted_at),
            "now": codec.timestamp(now),
            "checks": list(checks),
            "ns": namespace,
            "name": name,
        },
    )
    found = check_states(conn, [wid]).get(WorkloadId(wid), {})
    return {c: s for c, s in found.items() if c in checks}


def set_state(
    conn: Connection,
    wid: str,
    check: str,
    state: CheckState,
    *,
    message: str,
    now: float,
    admitted_at: float,
    next_attempt: bool = False,
    failed: bool = False,
) -> bool:
    """Set one check's state for the admission made at ``admitted_at`` (another
    admission's row is left alone); ``next_attempt`` counts a new request, ``failed``
    a failure. Whether a row changed."""
    namespace, _, name = wid.partition("/")
    result = conn.execute(
        text("""
UPDATE admission_check_states c
SET state = :state, message = :message, updated_at = :now,
    attempt = c.attempt + CAST(:next AS integer), failures = c.failures + CAST(:failed AS integer)
FROM workloads w
WHERE w.id = c.workload_id AND w.namespace = :ns AND w.name = :name AND c.check_name = :check
  AND c.admitted_at BETWEEN CAST(:at AS timestamptz) - interval '1 ms'
                        AND CAST(:at AS timestamptz) + interval '1 ms'
"""),
        {
            "state": state.value,
            "message": message,
            "now": codec.timestamp(now),
            "next": int(next_attempt),
            "failed": int(failed),
            "ns": namespace,
            "name": name,
            "check": check,
            "at": codec.timestamp(admitted_at),
        },
    )
    return bool(result.rowcount)


def queue_checks(conn: Connection) -> dict[str, tuple[str, ...]]:
    """Each ClusterQueue that lists admission checks, with its checks in order."""
    rows = conn.execute(
        text("SELECT name, admission_checks FROM cluster_queues WHERE admission_checks <> '[]'")
    )
    return {r.name: tuple(r.admission_checks) for r in rows}
