"""The admission webhook's view of the system of record, read from Postgres.

Why it exists: :mod:`queuemgr.k8s` defines the narrow
:class:`~queuemgr.k8s.queue_directory.QueueDirectory` port and may not import the
store; the controller layer, which may import both, implements it here over
:mod:`queuemgr.store.webhook_lookups`.

What must stay true: each answer comes from one short read-only transaction
(no lock held across requests); any database error becomes
:class:`~queuemgr.k8s.queue_directory.DirectoryUnavailable`, so the webhook applies
its outage rule instead of failing the API server's call with a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from queuemgr.core.directory import AdmittedView, ClusterQueueView
from queuemgr.k8s.queue_directory import DirectoryUnavailable
from queuemgr.store import webhook_lookups as store
from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database, Tx

T = TypeVar("T")


class StoreQueueDirectory:
    def __init__(self, db: Database) -> None:
        self.db = db

    def _read(self, query: Callable[[Tx], T]) -> T:
        try:
            with self.db.read() as conn:
                return query(conn)
        except StoreError as error:
            raise DirectoryUnavailable(f"the queuemgr database: {error.kind}") from error

    def local_queue(self, namespace: str, name: str) -> str | None:
        return self._read(lambda conn: store.local_queue_target(conn, namespace, name))

    def local_queues(self, namespace: str) -> list[str]:
        return self._read(lambda conn: store.local_queue_names(conn, namespace))

    def cluster_queue(self, name: str) -> ClusterQueueView | None:
        return self._read(lambda conn: store.cluster_queue_view(conn, name))

    def admitted(self, namespace: str, name: str) -> AdmittedView | None:
        return self._read(lambda conn: store.admitted_view(conn, namespace, name))
