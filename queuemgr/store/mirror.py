"""The leader's copy of the live workloads, kept in step by reading only what changed.

Why it exists: a cycle needs every queued and admitted workload, and reading
and decoding all of them from Postgres for every cycle costs seconds at tens
of thousands of rows, while a cycle typically changes a handful. The mirror
keeps the rows it read, with their ``version``, and a ``core.cache.Cache``
built from them. Each :meth:`StateMirror.refresh` reads, in one REPEATABLE
READ transaction: a fingerprint of the configuration tables (the config is
reloaded only when it differs), the ``(id, version)`` of the live rows, and
in full only the rows that are new or whose version moved. The leader's own
writes are folded in after they commit (:meth:`StateMirror.committed`).

What must stay true:

- a refresh returns exactly what a fresh mirror's first refresh
  (:func:`queuemgr.store.repository.load_state`) reads at the same instant and
  ``now`` (one consistent snapshot; pending
  workloads of stopped ClusterQueues withheld, and those still backing off;
  the claims of the pending ones, the evicted ones as ``stopping``), because
  every change of a workload row bumps its ``version`` (see ``store.models``)
  and pod sets never change after submission; a row whose backoff ends joins
  the pending workloads at the first refresh at or after its ``requeue_at``;
- the mirror records a version only for content it knows: a write of its own
  is folded in only when the row's new version is the one it read plus one,
  otherwise the row is re-read by the next refresh;
- anything unexpected (an exception while applying) empties the mirror, and
  the next refresh reads everything again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from types import MappingProxyType

from sqlalchemy import Connection, text

from queuemgr.core.cache import Cache
from queuemgr.core.claims import Claim
from queuemgr.core.lifecycle import WorkloadState
from queuemgr.core.model import AdmittedWorkload, ClusterQueueName, WorkloadId
from queuemgr.core.reasons import Decisions
from queuemgr.core.resources import ResourceName
from queuemgr.core.snapshot import Config
from queuemgr.store import codec
from queuemgr.store.config_objects import load_config
from queuemgr.store.decisions import Persisted
from queuemgr.store.handle import Database
from queuemgr.store.live import LiveRow, Status, read_live, read_stopping
from queuemgr.store.state import StoredState, with_claims
from queuemgr.store.tenant_view import read_as_tenant

# Which row versions the configuration tables hold: every INSERT or UPDATE
# writes a tuple with a new (ctid, xmin), a DELETE removes one. An equal count
# and sum of their 64-bit hashes means the same rows, so load_config can be
# skipped; a false alarm (VACUUM FULL moves rows) only costs a reload.
_CONFIG_TABLES = (
    "flavors",
    "nodes",
    "cohorts",
    "cohort_quotas",
    "cluster_queues",
    "cluster_queue_quotas",
    "local_queues",
)
_CONFIG_FINGERPRINT = text(
    "SELECT count(*)::text || ':' || coalesce(sum(h), 0)::text FROM ("
    + " UNION ALL ".join(
        f"SELECT hashtextextended('{t} ' || x.ctid::text || ' ' || x.xmin::text, 0) AS h FROM {t} x"
        for t in _CONFIG_TABLES
    )
    + ") AS rows"
)
# The ids and versions of the live rows as two arrays (decoded in C, not row by
# row); each half matches one partial index's predicate (see store.models).
_VERSIONS = text("""
SELECT coalesce(array_agg(id), '{}'), coalesce(array_agg(version), '{}') FROM (
    SELECT id, version FROM workloads WHERE state IN ('Pending', 'Inadmissible')
    UNION ALL
    SELECT id, version FROM workloads WHERE state = 'Admitted'
) AS live
""")


class StateMirror:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything: the next refresh reads all live rows and the config."""
        self._rows: dict[int, LiveRow] = {}
        self._versions: dict[int, int] = {}  # row id -> the version of self._rows[id]
        self._ids: dict[WorkloadId, int] = {}
        self._statuses: dict[WorkloadId, Status] = {}  # of the queued rows, as stored
        # What the admitted workloads hold, per LocalQueue (namespace, name), and which
        # of those vectors were made since held_by_queue last handed them out.
        self._held: dict[tuple[str, str], dict[ResourceName, int]] = {}
        self._held_own: set[tuple[str, str]] = set()
        self._fingerprint: str | None = None
        self._config: Config | None = None
        self._stopped: frozenset[ClusterQueueName] = frozenset()
        self._cache: Cache | None = None
        # Of the queued rows kept out of the cache: row id -> when its backoff ends;
        # of those in it: row id -> its claim. Both follow the cache (rebuilt with it).
        self._backing_off: dict[int, float] = {}
        self._claims: dict[int, Claim] = {}
        self._stopping: frozenset[WorkloadId] = frozenset()
        self._now = 0.0  # the last refresh's
        # Rows as read before their admission was folded in ahead of its commit.
        self._ahead: list[LiveRow] = []
        self.rows_read = 0  # full rows the last refresh read

    @property
    def live(self) -> int:
        """How many live rows the mirror holds."""
        return len(self._rows)

    def row_ids(self) -> Mapping[WorkloadId, int]:
        """Each live workload's row id (a read-only view, valid until the next change)."""
        return MappingProxyType(self._ids)

    def held_by_queue(self) -> dict[tuple[str, str], Mapping[ResourceName, int]]:
        """What the admitted workloads hold per LocalQueue (inner vectors never change)."""
        self._held_own.clear()  # each handed out now: copied before its next change
        return dict(self._held)

    def refresh(
        self, db: Database, *, now: float | None = None, as_tenant: bool = False
    ) -> StoredState:
        """The state as of ``now`` (the wall clock when not given), reading only what changed.

        ``now`` decides which queued workloads still back off (``requeue_at``).
        ``as_tenant`` reads the tenant views (``store.tenant_view``) for everything
        after the configuration's fingerprint, which only the tables have.
        """
        now = time.time() if now is None else now
        with db.snapshot() as conn:
            fingerprint = str(conn.execute(_CONFIG_FINGERPRINT).scalar_one())
            if as_tenant:
                read_as_tenant(conn)
            loaded = load_config(conn) if fingerprint != self._fingerprint else None
            fetched, gone = self._read_changes(conn)
            stopping = read_stopping(conn)
        try:
            self._now = now
            self._stopping = stopping
            if loaded is not None:
                self._config, self._stopped = loaded
                self._fingerprint = fingerprint
                self._drop_cache()  # rebuilt below from every row
            for i in gone:
                self._take(self._rows[i])
            for row in fetched:
                self._put(row)
            if self._cache is None:
                assert self._config is not None
                self._cache = Cache(self._config)
                for row in self._rows.values():
                    self._cache_add(row)
            else:
                due = [i for i, at in self._backing_off.items() if at <= now]
                for i in due:  # their backoff is over: pending from this cycle on
                    del self._backing_off[i]
                    self._enqueue(self._rows[i])
            return self._state()
        except Exception:
            self.reset()
            raise

    def _read_changes(self, conn: Connection) -> tuple[list[LiveRow], list[int]]:
        if not self._rows:
            rows = read_live(conn)
            self.rows_read = len(rows)
            return rows, []
        ids, versions = conn.execute(_VERSIONS).one()
        live = dict(zip(ids, versions, strict=True))
        # Set operations on dict views run in C: cheap even at 100,000 rows.
        changed = [i for i, _ in live.items() - self._versions.items()]
        gone = list(self._versions.keys() - live.keys())
        known = {i: self._rows[i].workload for i in changed if i in self._rows}
        fetched = read_live(conn, changed, known) if changed else []
        self.rows_read = len(fetched)
        return fetched, gone

    def _state(self) -> StoredState:
        assert self._cache is not None and self._config is not None
        rows = self._rows
        claims = {rows[i].workload.id: c for i, c in self._claims.items()}
        return StoredState(
            config=self._config,
            pending=tuple(self._cache.pending()),
            admitted=tuple(self._cache.admitted()),
            stopped=self._stopped,
            # A read-only view, valid until the next refresh or commit.
            statuses=MappingProxyType(self._statuses),
            claims=claims,
            stopping=self._stopping,
            backing_off={rows[i].workload.id: at for i, at in self._backing_off.items()},
            backing_off_workloads=tuple(rows[i].workload for i in self._backing_off),
            prebuilt=with_claims(self._cache.snapshot(), claims, self._stopping),
        )

    def _drop_cache(self) -> None:
        self._cache = None
        self._backing_off.clear()
        self._claims.clear()

    # -- keeping rows, held resources and the cache in step ------------------------
    def _put(self, row: LiveRow) -> None:
        """``row`` is now what the store holds under its id."""
        old = self._rows.get(row.id)
        if old is not None:
            self._take(old)
        self._rows[row.id] = row
        self._versions[row.id] = row.version
        self._ids[row.workload.id] = row.id
        if row.admitted is not None:
            self._hold(row.admitted, +1)
        else:
            self._set_status(row.workload.id, (row.state, row.reason, row.message))
        self._cache_add(row)

    def _take(self, row: LiveRow) -> None:
        del self._rows[row.id]
        del self._versions[row.id]
        wid = row.workload.id
        if self._ids.get(wid) == row.id:
            del self._ids[wid]
        if row.admitted is not None:
            self._hold(row.admitted, -1)
        else:
            self._statuses.pop(wid, None)
        self._claims.pop(row.id, None)
        backing_off = self._backing_off.pop(row.id, None) is not None
        if self._cache is None:
            return
        if row.admitted is not None:
            self._cache.remove_admitted(wid)
        elif not backing_off and self._cache.is_pending(wid):  # not if its queue is stopped
            self._cache.remove_pending(wid)

    def _set_status(self, wid: WorkloadId, status: Status) -> None:
        self._statuses[wid] = status

    def _cache_add(self, row: LiveRow) -> None:
        if self._cache is None or self._config is None:
            return
        if row.admitted is not None:
            self._cache.add_admitted(row.admitted)
        elif row.backs_off(self._now):
            assert row.requeue_at is not None
            self._backing_off[row.id] = row.requeue_at
        else:
            self._enqueue(row)

    def _enqueue(self, row: LiveRow) -> None:
        """A queued row that does not back off: pending, unless its ClusterQueue is stopped."""
        assert self._cache is not None and self._config is not None
        if not (self._stopped and self._config.route(row.workload) in self._stopped):
            self._cache.add_pending(row.workload)
            if row.claim is not None:
                self._claims[row.id] = row.claim

    def _hold(self, a: AdmittedWorkload, sign: int) -> None:
        key = (a.workload.namespace, a.workload.queue)
        vec = self._held.get(key)
        if vec is None or key not in self._held_own:
            # Copied on its first change since it was last handed out, then its own.
            vec = self._held[key] = dict(vec or {})
            self._held_own.add(key)
        for r, v in a.held.items():
            left = vec.get(r, 0) + sign * v
            if left:
                vec[r] = left
            else:
                vec.pop(r, None)
        if not vec:
            del self._held[key]

    # -- the leader's own writes ----------------------------------------------------
    def fold_ahead(self, admitted: tuple[AdmittedWorkload, ...], *, now: float) -> None:
        """Fold admissions in, each as the next version of its row, ahead of their commit
        (``controller.writer``: while their transaction runs); :meth:`committed` checks
        the versions, :meth:`undo_ahead` takes them back."""
        try:
            at = codec.as_stored(now)
            for a in admitted:
                i = self._ids.get(a.workload.id)
                row = None if i is None else self._rows.get(i)
                if row is not None and row.admitted is None:
                    self._ahead.append(row)
                    self._put(_admitted(row, a, at))
        except Exception:
            self.reset()
            raise

    def undo_ahead(self) -> None:
        """Their transaction failed: each row folded ahead is the one read again."""
        ahead, self._ahead = self._ahead, []
        try:
            for row in reversed(ahead):
                self._put(row)
        except Exception:
            self.reset()
            raise

    def committed(self, decisions: Decisions, persisted: Persisted, *, now: float) -> None:
        """Fold in a cycle's committed decisions; rows not provably known are re-read later."""
        try:
            if not self._ahead:  # not folded while it was written: folded now
                self.fold_ahead(decisions.admitted, now=now)
            ahead, self._ahead = self._ahead, []
            for read in ahead:  # a row written by someone else too is read again
                if persisted.versions.get(read.workload.id) != read.version + 1:
                    self._stale(read.workload.id)
            for wid, (state, reason, message) in persisted.statuses.items():
                queued = self._own(wid, persisted)
                if queued is not None:  # still queued: the cache is unchanged
                    self._rows[queued.id] = _moved(queued, state, reason, message, None)
                    self._versions[queued.id] = queued.version + 1
                    self._set_status(wid, (state, reason, message))
            for e in decisions.evicted:  # left the live set: the next refresh drops it
                self._stale(e.victim.workload.id)
        except Exception:
            self.reset()
            raise

    def _own(self, wid: WorkloadId, persisted: Persisted) -> LiveRow | None:
        """The row, if this write is the only one since it was read; else mark it stale."""
        i = self._ids.get(wid)
        row = None if i is None else self._rows.get(i)
        if row is None:
            return None
        if persisted.versions.get(wid) != row.version + 1:
            self._stale(wid)
            return None
        return row

    def _stale(self, wid: WorkloadId) -> None:
        i = self._ids.get(wid)
        row = None if i is None else self._rows.get(i)
        if row is not None:
            # No stored version is negative: the next refresh reads the row again.
            self._rows[row.id] = dataclasses.replace(row, version=-1)
            self._versions[row.id] = -1


def _admitted(row: LiveRow, a: AdmittedWorkload, at: float) -> LiveRow:
    """``row`` admitted as ``a`` decided, at ``at`` (stored time)."""
    admitted = AdmittedWorkload(workload=row.workload, admission=a.admission, admitted_at=at)
    return _moved(row, WorkloadState.ADMITTED, "Admitted", "", admitted)


def _moved(
    row: LiveRow,
    state: WorkloadState,
    reason: str,
    message: str,
    admitted: AdmittedWorkload | None,
) -> LiveRow:
    queued = admitted is None  # an admission ends the claim and any backoff
    return LiveRow(  # not dataclasses.replace: this runs once per admission
        id=row.id,
        version=row.version + 1,
        state=state,
        reason=reason,
        message=message,
        workload=row.workload,
        admitted=admitted,
        claim=row.claim if queued else None,
        requeue_at=row.requeue_at if queued else None,
    )
