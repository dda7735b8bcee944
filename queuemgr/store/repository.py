"""The one way to read a cycle's inputs: a consistent snapshot of the store, as StoredState.

Why it exists: ``why``, the CLI's views and the tests must see exactly what
the leader's cycle would see. The leader keeps a :class:`StateMirror` that
reads only what changed; every other reader gets a fresh mirror's first
refresh, which reads everything through the same code, so the two loaders
cannot drift apart.

What must stay true: the config and the workloads are read in one
REPEATABLE READ transaction (``StateMirror.refresh``), so a cycle never sees
a queue's new quota with the old set of admitted workloads (or the other way
round); what is withheld or set apart is :class:`~queuemgr.store.state.StoredState`'s.
"""

from __future__ import annotations

from queuemgr.store.handle import Database
from queuemgr.store.mirror import StateMirror
from queuemgr.store.state import StoredState


def load_state(db: Database, *, now: float | None = None, as_tenant: bool = False) -> StoredState:
    """Config plus queued and admitted workloads, read from one consistent snapshot.

    ``now`` (the wall clock when not given) decides which workloads still back off.
    ``as_tenant`` reads the tenant views (``store.tenant_view``): every live
    workload, other namespaces' under tokens, where row security would show a
    tenant its own alone. A database failure is a :class:`~queuemgr.store.errors.StoreError`.
    """
    return StateMirror().refresh(db, now=now, as_tenant=as_tenant)
