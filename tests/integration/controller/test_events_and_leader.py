"""Running loops: NOTIFY wakes them; one leader; failover within 5 s; a lost leader is fenced."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.controller.leader import REJOIN_HEARTBEATS, LeaderElector
from queuemgr.controller.listener import NotifyListener
from queuemgr.controller.loop import SERVICE_POLICY, SchedulerLoop
from queuemgr.core.cycle import schedule
from queuemgr.store.handle import Database
from queuemgr.store.leadership import (
    FENCED_IDLE_TIMEOUT,
    NotLeader,
    fence,
    holder_pid,
    release,
    renew,
    try_acquire,
)
from queuemgr.store.repository import load_state
from queuemgr.store.transitions import submit_workload
from tests.integration.controller.helpers import make_loop, placements, states, wait_for
from tests.integration.store.helpers import gang, seed_config

pytestmark = pytest.mark.integration


def _submit(engine: Engine, name: str) -> None:
    with engine.begin() as conn:
        submit_workload(conn, gang(name, created_at=time.time()))


def _terminate(engine: Engine, pid: int) -> None:
    """What Postgres sees when the leader process dies: its lock session ends."""
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        conn.commit()


class Replica:
    def __init__(self, engine: Engine, name: str) -> None:
        self.loop, self.elector, self.backend = make_loop(engine, replica=name)
        self.listener = NotifyListener(Database(engine), self.loop.wake)

    def start(self) -> None:
        self.loop.start()
        self.listener.start()
        self.elector.start()

    def stop(self) -> None:
        self.elector.stop()
        self.listener.stop()
        self.loop.stop()


@pytest.fixture
def replicas(engine: Engine) -> Iterator[list[Replica]]:
    seed_config(engine)
    made = [Replica(engine, "a"), Replica(engine, "b")]
    yield made
    for r in made:
        r.stop()


def test_notify_wakes_the_loop_without_waiting_for_the_safety_cycle(
    engine: Engine, replicas: list[Replica]
) -> None:
    r = replicas[0]
    r.start()
    wait_for(lambda: r.elector.is_leader and r.listener.listening.is_set(), timeout=5)
    wait_for(lambda: r.loop.cycles >= 1, timeout=5)  # the wake-up of the election
    _submit(engine, "a")
    took = wait_for(lambda: states(engine).get("a") == "Admitted", timeout=2, step=0.005)
    assert took < 2  # the safety interval is 30 s: only the NOTIFY can explain this
    wait_for(lambda: r.backend.start_calls["team-a/a"] == 1, timeout=2)


def test_one_leader_schedules_and_a_standby_takes_over_within_5s(
    engine: Engine, replicas: list[Replica]
) -> None:
    for r in replicas:
        r.start()
    wait_for(lambda: any(r.elector.is_leader for r in replicas), timeout=5)
    leader, standby = sorted(replicas, key=lambda r: not r.elector.is_leader)
    assert not standby.elector.is_leader
    _submit(engine, "a")
    wait_for(lambda: leader.backend.start_calls["team-a/a"] == 1, timeout=2)
    assert not standby.backend.start_calls

    token = leader.elector.token
    assert token is not None
    _terminate(engine, token.pid)
    killed = time.monotonic()
    wait_for(lambda: standby.elector.is_leader, timeout=5)
    assert time.monotonic() - killed < 5
    # The new leader adopts the admitted gang (its backend did not run it) and schedules.
    wait_for(lambda: standby.backend.running() == {"team-a/a"}, timeout=2)
    _submit(engine, "b")
    wait_for(lambda: states(engine).get("b") == "Admitted", timeout=2)
    assert standby.backend.start_calls["team-a/b"] == 1
    assert "team-a/b" not in leader.backend.start_calls
    wait_for(lambda: not leader.elector.is_leader, timeout=3)  # it noticed at its heartbeat
    with engine.connect() as conn:
        new_token = standby.elector.token
        assert new_token is not None and holder_pid(conn) == new_token.pid


def _gone(engine: Engine, pid: int) -> bool:
    with engine.connect() as conn:
        q = sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid")
        return conn.execute(q, {"pid": pid}).scalar() == 0


def test_a_replica_that_lost_the_lease_lets_a_standby_take_it_first(engine: Engine) -> None:
    """The handover goes to a healthy standby, not back to the replica whose session died.

    Before, the replica that noticed its loss tried to take the lease again in the same
    step, and won whenever its heartbeat came before the standby's try: the failover
    test's standby then never led (CI failed on it once)."""
    retry = 0.2
    old = LeaderElector(Database(engine), replica="old", retry_interval=retry)
    standby = LeaderElector(Database(engine), replica="standby", retry_interval=retry)
    try:
        assert old.step()
        token = old.token
        assert token is not None
        _terminate(engine, token.pid)
        wait_for(lambda: _gone(engine, token.pid), timeout=5)
        assert not old.step()  # it notices, and does not take the free lease back
        assert not old.is_leader
        assert standby.step()
        # Alone, a replica that lost the lease leads again after its pause.
        new = standby.token
        assert new is not None
        _terminate(engine, new.pid)
        wait_for(lambda: _gone(engine, new.pid), timeout=5)
        lost = time.monotonic()
        assert not standby.step()
        wait_for(standby.step, timeout=REJOIN_HEARTBEATS * retry + 5, step=0.05)
        assert time.monotonic() - lost >= REJOIN_HEARTBEATS * retry * 0.9
    finally:
        old.stop()
        standby.stop()


def test_an_old_leader_that_lost_its_lock_cannot_commit(engine: Engine) -> None:
    seed_config(engine)
    _submit(engine, "a")
    old, old_elector, _ = make_loop(engine, replica="old")
    _new, new_elector, _ = make_loop(engine, replica="new")
    try:
        assert old_elector.step()
        token = old_elector.token
        assert token is not None
        # The old leader computes its decisions, then pauses ...
        state = load_state(Database(engine))
        snapshot = dataclasses.replace(state.snapshot(), policy=SERVICE_POLICY)
        decisions = schedule(snapshot, time.time())
        assert decisions.admitted
        # ... while its lock session dies and another replica wins the election.
        _terminate(engine, token.pid)
        wait_for(new_elector.step, timeout=5, step=0.1)
        assert old_elector.token == token  # it has not noticed yet
        with pytest.raises(NotLeader):
            _commit(old, token, decisions, state)
        assert states(engine) == {"a": "Pending"} and placements(engine) == {}
    finally:
        old_elector.stop()
        new_elector.stop()


def _commit(loop: SchedulerLoop, *args: object) -> None:
    loop._commit(*args, now=time.time())  # type: ignore[arg-type]


def test_a_stopping_leader_hands_over_at_once(engine: Engine) -> None:
    _, leaving, _ = make_loop(engine, replica="leaving")
    _, standby, _ = make_loop(engine, replica="standby")
    try:
        assert leaving.step()
        assert not standby.step()
        leaving.stop()
        # Released by an explicit unlock before the connection closes: the standby's
        # very next try wins, however late the server notices the disconnect.
        assert standby.step()
        with engine.connect() as conn:
            assert standby.token is not None and holder_pid(conn) == standby.token.pid
    finally:
        leaving.stop()
        standby.stop()


def test_release_gives_the_lock_up_while_its_connection_stays_open(engine: Engine) -> None:
    autocommit = {"isolation_level": "AUTOCOMMIT"}
    with (
        engine.connect().execution_options(**autocommit) as first,
        engine.connect().execution_options(**autocommit) as second,
    ):
        assert try_acquire(first) is not None
        assert try_acquire(second) is None
        release(first)
        assert try_acquire(second) is not None


def test_a_silent_leader_loses_the_lease_once_it_expires_and_cannot_commit(
    engine: Engine,
) -> None:
    """A leader whose backend lives on but that stops renewing (a paused process) is
    replaced after the lease's TTL, and its old token no longer passes the fence."""
    autocommit = {"isolation_level": "AUTOCOMMIT"}
    with (
        engine.connect().execution_options(**autocommit) as silent,
        engine.connect().execution_options(**autocommit) as standby,
    ):
        old = try_acquire(silent, ttl=1.0)
        assert old is not None
        assert try_acquire(standby, ttl=1.0) is None  # alive and not expired
        time.sleep(1.2)
        new = try_acquire(standby, ttl=1.0)
        assert new is not None and new.epoch == old.epoch + 1
        assert not renew(silent, old)  # its heartbeat now learns it lost
        with engine.begin() as conn, pytest.raises(NotLeader):
            fence(conn, old)
        with engine.begin() as conn:
            fence(conn, new)


def test_a_leader_paused_inside_a_decision_transaction_does_not_block_the_takeover(
    engine: Engine,
) -> None:
    """A leader paused (SIGSTOP) between the fence and the commit of a decision
    transaction holds the lease row FOR KEY SHARE. Its lease session ends, and the
    standby's takeover, which changes the epoch, waits for that transaction: before, for
    as long as the pause lasted (the failover test's standby waited until the teardown
    killed the paused leader). The fenced transaction now ends itself once it has been
    idle for FENCED_IDLE_TIMEOUT, so the standby leads within that and then some."""
    autocommit = {"isolation_level": "AUTOCOMMIT"}
    with (  # closed in reverse: the paused one first, which frees a standby still waiting
        engine.connect().execution_options(**autocommit) as lease,
        engine.connect().execution_options(**autocommit) as standby,
        engine.connect() as paused,
    ):
        token = try_acquire(lease)
        assert token is not None
        paused.begin()
        fence(paused, token)  # ...and the process stops here, its transaction open
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": token.pid})
            conn.commit()
        started = time.monotonic()
        won: list[object] = []
        taker = threading.Thread(target=lambda: won.append(try_acquire(standby)), daemon=True)
        taker.start()
        taker.join(timeout=FENCED_IDLE_TIMEOUT + 5)
        assert won and won[0] is not None, "the standby is still waiting for the paused leader"
        assert time.monotonic() - started < FENCED_IDLE_TIMEOUT + 5
        with pytest.raises(sa.exc.DBAPIError, match="idle-in-transaction"):  # ended, not committed
            paused.execute(sa.text("SELECT 1"))
