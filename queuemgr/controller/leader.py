"""Leader election: one replica schedules, holding the lease row of store/leadership.py.

Why it exists: several replicas may run for availability, but two schedulers
would admit onto the same free capacity. The lease is held for the backend of
a connection of its own (a :class:`~queuemgr.store.handle.Session`) and renewed
at every heartbeat (``retry_interval``, 1 s).
When the leader dies (kill -9, lost network, terminated backend) its backend
ends and a standby takes over at its next try, well within 5 s; a leader that
is alive but silent (paused) loses the lease once it expires. A replica that
lost the lease sits out ``REJOIN_HEARTBEATS`` heartbeats before it competes
again, so a healthy standby, not the replica whose session just died, wins the
handover; a lone replica leads again after that pause.

What must stay true: :attr:`token` is None unless this replica won the lease
and renewed it at the last heartbeat. Holding a token is not
proof of leadership (the process may have been paused): every decision
transaction is fenced with :func:`queuemgr.store.leadership.fence`, which
checks the lease in the database itself.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from queuemgr.metrics import SchedulerMetrics
from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database, Session
from queuemgr.store.leadership import LEASE_TTL, LeaderToken, release, renew, try_acquire

log = logging.getLogger(__name__)

# Heartbeats a replica that lost the lease waits before trying to take it back.
REJOIN_HEARTBEATS = 3


class LeaderElector:
    def __init__(
        self,
        db: Database,
        *,
        replica: str,
        metrics: SchedulerMetrics | None = None,
        retry_interval: float = 1.0,
        lease_ttl: float = LEASE_TTL,
        on_elected: Callable[[], None] | None = None,
    ) -> None:
        self._db = db
        self.replica = replica
        self._metrics = metrics
        self._retry = retry_interval
        self._ttl = lease_ttl
        self._on_elected = on_elected
        self._session: Session | None = None
        self._token: LeaderToken | None = None
        self._rejoin_at = 0.0  # monotonic time before which this replica does not compete
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set_gauge(False)

    @property
    def token(self) -> LeaderToken | None:
        return self._token

    @property
    def is_leader(self) -> bool:
        return self._token is not None

    def step(self) -> bool:
        """One heartbeat or one attempt to acquire; returns whether this replica leads."""
        with self._lock:
            if self._token is not None and self._alive():
                return True
            if self._token is not None:
                log.warning("replica %s lost the leader lease", self.replica)
                self._drop()
                self._rejoin_at = time.monotonic() + REJOIN_HEARTBEATS * self._retry
            if time.monotonic() < self._rejoin_at:
                return False
            try:
                if self._session is None:
                    self._session = self._db.session()
                with self._session.use() as conn:
                    self._token = try_acquire(conn, replica=self.replica, ttl=self._ttl)
            except StoreError as exc:
                log.warning("leader election: database unavailable: %s", exc)
                self._drop()
                return False
            if self._token is None:
                return False
            log.info("replica %s is the leader (backend %d)", self.replica, self._token.pid)
        self._set_gauge(True)
        if self._on_elected is not None:
            self._on_elected()
        return True

    def _alive(self) -> bool:
        assert self._session is not None and self._token is not None
        try:
            with self._session.use() as conn:
                return renew(conn, self._token, ttl=self._ttl)
        except StoreError:
            return False

    def _drop(self) -> None:
        """Forget the token and the session (its backend's end frees the lease, if held)."""
        self._token = None
        self._set_gauge(False)
        if self._session is not None:
            session, self._session = self._session, None
            session.close()

    def _set_gauge(self, leading: bool) -> None:
        if self._metrics is not None:
            self._metrics.set_leader(self.replica, leading)

    # -- background ----------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="queuemgr-leader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # keep electing whatever happens; the loop is fenced anyway
                log.exception("leader election step failed")
            self._stop.wait(self._retry)

    def stop(self) -> None:
        """Stop electing and release the lease (a clean handover, no waiting for it to expire)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            if self._token is not None and self._session is not None:
                # A dead connection has lost the lease already.
                with contextlib.suppress(StoreError), self._session.use() as conn:
                    release(conn)
            self._drop()
