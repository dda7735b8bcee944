"""A change of what the scheduler decides on wakes it, from the store, once it commits.

Before, each of 13 callers (CLI verbs, the Kubernetes node sync, serve's seeding)
sent ``pg_notify(..., 'config')`` itself after its write; a caller that forgot
left the change to the next safety cycle. The store's audited write now sends
it: on commit only, not for a write that changed nothing, not for a grant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url

from queuemgr.core.model import FlavorName, ResourceFlavor
from queuemgr.store import admin
from queuemgr.store.config_objects import upsert_flavor
from queuemgr.store.grants import grant
from queuemgr.store.notify import CHANNEL

pytestmark = pytest.mark.integration

FLAVOR = ResourceFlavor(name=FlavorName("b200"), node_labels={"gpu": "b200"})


@pytest.fixture
def heard(database_url: str) -> Iterator[Callable[[], list[str]]]:
    """The payloads the scheduler's channel received since the last call."""
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(False)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")

        def drain() -> list[str]:
            return [n.payload for n in listener.notifies(timeout=0.5)]

        yield drain


def _flavor(conn: Connection) -> None:
    upsert_flavor(conn, FLAVOR, actor="test")


def _relabel(conn: Connection) -> None:
    upsert_flavor(conn, ResourceFlavor(name=FLAVOR.name, node_labels={"gpu": "b"}), actor="test")


def _grant(conn: Connection) -> None:
    grant(conn, "queuemgr_tenant", "team-z", actor="test")


def _delete(conn: Connection) -> None:
    admin.delete_flavor(conn, FLAVOR.name, actor="test")


@pytest.mark.parametrize(
    ("writes", "expected"),
    [
        pytest.param([_flavor], ["config"], id="create"),
        pytest.param([_flavor, _relabel], ["config"], id="two-changes-one-wake"),
        pytest.param([_grant], [], id="grant"),
    ],
)
def test_a_committed_change_wakes_the_scheduler_once(
    engine: Engine,
    heard: Callable[[], list[str]],
    writes: list[Callable[[Connection], None]],
    expected: list[str],
) -> None:
    with engine.begin() as conn:
        for write in writes:
            write(conn)
    assert heard() == expected


def test_no_wake_for_a_rollback_or_a_write_that_changes_nothing(
    engine: Engine, heard: Callable[[], list[str]]
) -> None:
    with engine.connect() as conn:
        transaction = conn.begin()
        _flavor(conn)
        transaction.rollback()
    assert heard() == []
    with engine.begin() as conn:
        _flavor(conn)
    assert heard() == ["config"]
    with engine.begin() as conn:
        _flavor(conn)  # the same again
    assert heard() == []
    with engine.begin() as conn:
        _delete(conn)
    assert heard() == ["config"]
