"""store.notify.listen: the other end of the scheduler's channel, as the listener thread uses it.

It hears what commits (and nothing that rolls back), hands each payload over as
it arrives rather than at the end of its timeout, and a lost connection is a
StoreError, which the listener thread answers by reconnecting.
"""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.store.errors import StoreError
from queuemgr.store.handle import Database
from queuemgr.store.notify import listen, notify

pytestmark = pytest.mark.integration


def test_it_hears_what_commits_and_nothing_that_rolls_back(engine: Engine) -> None:
    db = Database(engine)
    with listen(db) as channel:
        with pytest.raises(LookupError), db.write() as tx:
            notify(tx, "lost")
            raise LookupError("rolled back")
        with db.write() as tx:
            notify(tx, "submitted")
        started = time.monotonic()
        heard = next(iter(channel.notifications(timeout=5.0)))
        assert heard == "submitted"
        assert time.monotonic() - started < 2.5  # at once, not at the end of the timeout
        assert list(channel.notifications(timeout=0.3)) == []


def test_a_lost_connection_is_a_store_error(engine: Engine) -> None:
    db = Database(engine)
    with pytest.raises(StoreError), listen(db) as channel:
        with db.read() as tx:
            tx.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE query LIKE 'LISTEN%' AND datname = current_database()"
                )
            )
        for _ in range(20):  # the loss shows at the next wait, whenever the socket says so
            list(channel.notifications(timeout=0.25))
