"""The Database handle: what its transactions keep, and the store's errors leaving them.

Everything above the store writes and reads through ``Database.write``/``read``
/``snapshot`` and catches ``StoreError``; these tests hold the handle to what
the callers rely on: a write commits whole or not at all, a read keeps nothing,
a snapshot does not move, and no SQLAlchemy or psycopg exception gets out,
not even one raised by the commit at the end of the block.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.store.database import DatabaseError, create_engine
from queuemgr.store.errors import InvalidValue, SchemaMissing, StoreError
from queuemgr.store.handle import Database

pytestmark = pytest.mark.integration

_COUNT = sa.text("SELECT count(*) FROM probe")
_INSERT = sa.text("INSERT INTO probe (name) VALUES (:name)")


@pytest.fixture(autouse=True)
def _probe(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE probe (name text)"))


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(_COUNT).scalar_one())


def test_a_write_commits_at_the_end_of_its_block(engine: Engine) -> None:
    db = Database(engine)
    with db.write() as tx:
        tx.execute(_INSERT, {"name": "kept"})
        assert _count(engine) == 0  # not before the block ends
    assert _count(engine) == 1


def test_a_write_that_raises_keeps_nothing(engine: Engine) -> None:
    db = Database(engine)
    with pytest.raises(LookupError), db.write() as tx:
        tx.execute(_INSERT, {"name": "lost"})
        raise LookupError("the caller's own error passes through unchanged")
    assert _count(engine) == 0


def test_a_read_keeps_nothing_it_ran(engine: Engine) -> None:
    db = Database(engine)
    with db.read() as tx:
        tx.execute(_INSERT, {"name": "read"})
    assert _count(engine) == 0


def test_a_snapshot_does_not_see_a_commit_made_after_it_began(engine: Engine) -> None:
    db = Database(engine)
    with db.snapshot() as tx:
        before = tx.execute(_COUNT).scalar_one()
        with db.write() as other:
            other.execute(_INSERT, {"name": "later"})
        assert tx.execute(_COUNT).scalar_one() == before
    with db.read() as tx:
        assert tx.execute(_COUNT).scalar_one() == before + 1


def test_driver_errors_leave_as_store_errors_with_their_cause(engine: Engine) -> None:
    db = Database(engine)
    with pytest.raises(StoreError) as caught, db.read() as tx:
        tx.execute(sa.text("SELECT no_such_column FROM workloads"))
    error = caught.value
    assert isinstance(error.__cause__, sa.exc.SQLAlchemyError)
    assert error.kind == "ProgrammingError"
    assert error.reason.startswith('column "no_such_column" does not exist')
    assert str(error) == str(error.__cause__)  # log lines read as before


def test_the_failures_callers_tell_apart_have_their_own_class(
    engine: Engine, empty_database_url: str
) -> None:
    db = Database(engine)
    with pytest.raises(InvalidValue, match="statement_timeout"), db.write() as tx:
        tx.execute(sa.text("SET statement_timeout = 'soon'"))
    empty = Database.open(empty_database_url)
    try:
        with pytest.raises(SchemaMissing, match="workloads"), empty.read() as tx:
            tx.execute(sa.text("SELECT 1 FROM workloads"))
    finally:
        empty.dispose()


def test_an_error_raised_by_the_commit_is_a_store_error(engine: Engine) -> None:
    """A deferred constraint is checked at COMMIT, after the block's last statement."""
    db = Database(engine)
    with db.write() as tx:
        tx.execute(sa.text("CREATE TABLE t_parent (id int PRIMARY KEY)"))
        tx.execute(
            sa.text(
                "CREATE TABLE t_child (parent int REFERENCES t_parent"
                " DEFERRABLE INITIALLY DEFERRED)"
            )
        )
    with pytest.raises(StoreError) as caught, db.write() as tx:
        tx.execute(sa.text("INSERT INTO t_child VALUES (1)"))  # fine until the commit
    assert caught.value.kind == "IntegrityError"


def test_a_session_holds_one_backend_across_calls(engine: Engine) -> None:
    db = Database(engine)
    session = db.session()
    try:
        with session.use() as tx:
            first = tx.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            tx.execute(_INSERT, {"name": "autocommit"})  # no block to commit it: it commits
        with session.use() as tx:
            assert tx.execute(sa.text("SELECT pg_backend_pid()")).scalar_one() == first
        assert _count(engine) == 1
        with db.read() as tx:
            tx.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        with pytest.raises(StoreError), session.use() as tx:
            tx.execute(sa.text("SELECT 1"))
    finally:
        session.close()
        session.close()  # twice, and on a dead backend: quietly


def test_an_unreachable_database_is_a_database_error_naming_it() -> None:
    db = Database(create_engine("postgresql://someone:secret@127.0.0.1:1/none?connect_timeout=2"))
    assert "secret" not in db.url
    with pytest.raises(DatabaseError, match="cannot connect to") as caught:
        db.check()
    assert isinstance(caught.value, StoreError)  # a database failure like any other
    with pytest.raises(StoreError):
        db.session()
    with pytest.raises(StoreError), db.write():
        pass
