"""kill -9 at random moments: no workload lost, none admitted twice, no node overcommitted.

A real ``queuemgr serve`` process schedules 1,000 workloads (jobs and gangs)
on a simulated cluster while the test kills it with SIGKILL at random points,
at least 20 times, and starts it again. Submissions keep arriving meanwhile,
straight into the store as tenants' would. A trigger of the test's own
records every transition into Admitted; a checker thread asks Postgres, in
one statement, whether any node holds more than it has.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.core.model import Workload
from queuemgr.store.transitions import submit_workload
from tests.integration.controller.helpers import wait_for
from tests.integration.service.processes import (
    ServeProcess,
    StoreChecker,
    Submitter,
    admissions_per_workload,
    cluster_yaml,
    install_admission_log,
    job,
    logs,
    overcommitted_nodes,
    state_counts,
    write_config,
)
from tests.integration.store.helpers import gang, seed_config

pytestmark = pytest.mark.integration

WORKLOADS = 1000
KILLS = 20
# (pods, GPUs per pod, share of the mix): mostly single GPUs, some gangs of 2 x 8.
MIX = ((1, 1, 0.70), (1, 2, 0.15), (1, 4, 0.10), (2, 8, 0.05))


def _submitter(engine: Engine, rng: random.Random) -> Submitter:
    def make(i: int) -> Workload:
        pods, gpus, _ = rng.choices(MIX, weights=[m[2] for m in MIX])[0]
        runtime = round(rng.uniform(0.1, 0.8), 3)
        return job(f"w{i:04d}", pods=pods, gpus=gpus, runtime=runtime, created_at=time.time())

    return Submitter(engine, WORKLOADS, batch=25, make=make, pause=lambda: rng.uniform(0.05, 0.4))


def test_kill_9_at_random_points_loses_nothing_and_admits_nothing_twice(
    tmp_path: Path, engine: Engine, database_url: str
) -> None:
    write_config(tmp_path, cluster_yaml(nodes=8), cycle_interval=1, default_runtime=1)
    install_admission_log(engine)
    rng = random.Random(20261202)
    checker = StoreChecker(engine, interval=0.1)
    checker.start()
    processes: list[ServeProcess] = []
    unfinished_at_kill: list[int] = []
    try:
        submitter = _submitter(engine, rng)
        for kill in range(KILLS):
            p = ServeProcess(tmp_path, database_url=database_url, replica=f"r{kill}").start()
            processes.append(p)
            if kill == 0:
                submitter.start()
            if rng.random() < 0.25:  # during start-up: imports, election, adoption
                time.sleep(rng.uniform(0.2, 1.5))
            else:  # mid-run: in a cycle, a commit, a start, a finish, between them
                wait_for(p.leads, timeout=60, step=0.05)
                time.sleep(rng.uniform(0.0, 1.5))
            assert p.alive, logs(processes)
            p.kill9()
            counts = state_counts(engine)
            unfinished_at_kill.append(WORKLOADS - counts.get("Finished", 0))
        last = ServeProcess(tmp_path, database_url=database_url, replica="last").start()
        processes.append(last)
        submitter.join(timeout=60)
        assert submitter.done.is_set()
        wait_for(
            lambda: state_counts(engine).get("Finished", 0) == WORKLOADS, timeout=180, step=0.5
        )
        # SIGTERM's clean stop is set up once serve is running; a quick run may end before.
        wait_for(last.leads, timeout=60, step=0.05)
        assert last.terminate() == 0, logs(processes)
    finally:
        checker.stop.set()
        checker.join(timeout=5)
        for p in processes:
            if p.alive:
                p.kill9()

    assert len(unfinished_at_kill) >= 20
    # The kills hit a run in progress, not an idle service after the fact.
    assert sum(1 for n in unfinished_at_kill if n > 0) >= 15, unfinished_at_kill
    assert state_counts(engine) == {"Finished": WORKLOADS}
    admissions = admissions_per_workload(engine)
    assert len(admissions) == WORKLOADS
    twice = {name: n for name, n in admissions.items() if n != 1}
    assert not twice, f"admitted other than once: {twice}"
    assert checker.checks > 50
    assert not checker.violations, checker.violations[:5]
    assert not checker.fell, checker.fell
    assert overcommitted_nodes(engine) == []


def test_the_overcommit_check_sees_a_node_holding_more_than_it_has(engine: Engine) -> None:
    # The crash test's checker must be able to fail: two 8-GPU pods on one 8-GPU node.
    seed_config(engine)
    with engine.begin() as conn:
        for name in ("a", "b"):
            wid = submit_workload(conn, gang(name))
            conn.execute(
                sa.text("UPDATE workloads SET state = 'Admitted' WHERE id = :id"), {"id": wid}
            )
            conn.execute(
                sa.text(
                    "INSERT INTO placements (workload_id, pod_set, node, count) "
                    "VALUES (:id, 'workers', 'node-0', 1)"
                ),
                {"id": wid},
            )
    over = {(node, res): (used, cap) for node, res, used, cap in overcommitted_nodes(engine)}
    assert over[("node-0", "nvidia.com/gpu")] == (16, 8)
