"""Real ``queuemgr serve`` processes for the crash, failover and outage tests.

Why it exists: kill -9 and a standby taking over only mean something for a
separate process with its own connections and its own simulated backend; an
in-process thread cannot be killed that way. Each process logs to a file the
test prints when it fails. :class:`Submitter` plays the tenants who keep
submitting meanwhile.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from queuemgr.core.model import PodSet, Workload
from queuemgr.core.resources import ResourceName
from queuemgr.store.transitions import submit_workload

GPU = ResourceName("nvidia.com/gpu")
CPU = ResourceName("cpu")
MEM = ResourceName("memory")
GI = 2**30


def cluster_yaml(*, nodes: int, gpus_per_node: int = 8) -> str:
    """One flavor, ``nodes`` nodes, one ClusterQueue owning all of it, one LocalQueue."""
    total = nodes * gpus_per_node
    return f"""
flavors:
  - {{name: h100, node_labels: {{gpu: h100}}}}
nodes:
  - name: node
    count: {nodes}
    flavor: h100
    allocatable: {{nvidia.com/gpu: {gpus_per_node}, cpu: 96, memory: 1Ti}}
cluster_queues:
  - name: team-a
    namespaces: [team-a]
    resources:
      - flavor: h100
        nominal: {{nvidia.com/gpu: {total}, cpu: {96 * nodes}, memory: {nodes}Ti}}
local_queues:
  - {{namespace: team-a, name: default, cluster_queue: team-a}}
"""


def job(name: str, *, pods: int, gpus: int, runtime: float, created_at: float) -> Workload:
    """A gang of ``pods`` x ``gpus`` GPUs that the simulated backend runs ``runtime`` seconds."""
    return Workload(
        namespace="team-a",
        name=name,
        queue="default",
        priority=0,
        created_at=created_at,
        max_runtime=runtime,
        pod_sets=(
            PodSet(
                name="workers",
                count=pods,
                requests={GPU: gpus, CPU: 1000 * gpus, MEM: 8 * GI * gpus},
            ),
        ),
    )


class Submitter(threading.Thread):
    """Submits ``make(i)`` for each ``i`` below ``count`` straight into the store, as tenants would.

    Batches of ``batch`` workloads, one transaction each, ``pause()`` seconds apart.
    With ``retry``, a batch the database refuses (an outage) is tried again after
    0.2 s, as a client would, and the first line of each refusal is kept in
    ``refused``; without it the refusal ends the thread. With ``skip_stored``
    as well, a retry leaves out the workloads already in the store: a commit
    whose answer the outage cut off did happen, and submitting them again would
    be refused as duplicates (they are counted in ``skipped``). ``done`` is set
    once every workload is submitted.
    """

    def __init__(
        self,
        engine: Engine,
        count: int,
        *,
        batch: int,
        make: Callable[[int], Workload],
        pause: Callable[[], float],
        retry: bool = False,
        skip_stored: bool = False,
    ) -> None:
        super().__init__(name="submitter", daemon=True)
        self.engine = engine
        self.count = count
        self.batch = batch
        self.make = make
        self.pause = pause
        self.retry = retry
        self.skip_stored = skip_stored
        self.refused: list[str] = []
        self.skipped = 0
        self.done = threading.Event()

    def run(self) -> None:
        for start in range(0, self.count, self.batch):
            workloads = [self.make(i) for i in range(start, min(start + self.batch, self.count))]
            retried = False
            while True:
                try:
                    with self.engine.begin() as conn:
                        if retried and self.skip_stored:
                            stored = _stored(conn, workloads)
                            self.skipped += len(stored)
                            workloads = [w for w in workloads if w.id not in stored]
                        for w in workloads:
                            submit_workload(conn, w)
                    break
                except OperationalError as exc:
                    if not self.retry:
                        raise
                    self.refused.append(str(exc).splitlines()[0])
                    retried = True
                    time.sleep(0.2)
            time.sleep(self.pause())
        self.done.set()


def _stored(conn: Connection, workloads: Sequence[Workload]) -> set[str]:
    """The ids (namespace/name) of those of ``workloads`` that have a row."""
    rows = conn.execute(
        sa.text("SELECT namespace || '/' || name AS id FROM workloads WHERE name = ANY(:names)"),
        {"names": [w.name for w in workloads]},
    )
    ids = {w.id for w in workloads}
    return {r.id for r in rows if r.id in ids}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """One ``queuemgr serve`` replica, started with its own config file and HTTP port."""

    def __init__(
        self,
        workdir: Path,
        *,
        database_url: str,
        replica: str,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.replica = replica
        self.log_path = workdir / f"serve-{replica}.log"
        self._env = {
            **os.environ,
            "QUEUEMGR_DATABASE_URL": database_url,
            "QUEUEMGR_REPLICA": replica,
            "QUEUEMGR_HTTP_ADDRESS": f"127.0.0.1:{self.port}",
            **(extra_env or {}),
        }
        self._config = workdir / "serve.yaml"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServeProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "queuemgr", "serve", "--config", str(self._config)],
                env=self._env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 20) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str) -> tuple[int, str]:
        """(status, body) of an HTTP GET; (0, error) when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def role(self) -> str | None:
        """'leader' or 'standby' from /readyz, or None while not ready."""
        status, body = self.get("/readyz")
        if status != 200:
            return None
        return "leader" if "(leader)" in body else "standby"

    def leads(self) -> bool:
        return self.role() == "leader"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def write_config(workdir: Path, cluster: str, **settings: object) -> None:
    (workdir / "cluster.yaml").write_text(cluster)
    lines = ["cluster_file: cluster.yaml", *(f"{k}: {json.dumps(v)}" for k, v in settings.items())]
    (workdir / "serve.yaml").write_text("\n".join(lines) + "\n")


ADMISSION_LOG = """
CREATE TABLE test_admissions (
  workload_id bigint NOT NULL, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION test_log_admission() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO test_admissions (workload_id) VALUES (NEW.id);
  RETURN NEW;
END $$;
CREATE TRIGGER test_admission AFTER INSERT OR UPDATE OF state ON workloads FOR EACH ROW
  WHEN (NEW.state = 'Admitted') EXECUTE FUNCTION test_log_admission();
"""


def install_admission_log(engine: Engine) -> None:
    """Record every transition into Admitted (the test's own table, not the schema's)."""
    with engine.begin() as conn:
        conn.exec_driver_sql(ADMISSION_LOG)


def admissions_per_workload(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT w.name, count(a.workload_id) AS n FROM workloads w "
                "LEFT JOIN test_admissions a ON a.workload_id = w.id GROUP BY w.name"
            )
        )
        return {r.name: int(r.n) for r in rows}


OVERCOMMITTED = sa.text("""
SELECT p.node, r.key AS resource, SUM(p.count * r.value::bigint) AS used,
       (n.allocatable ->> r.key)::bigint AS capacity
FROM placements p
JOIN workloads w ON w.id = p.workload_id AND w.state IN ('Admitted', 'Evicted')
JOIN pod_sets ps ON ps.workload_id = p.workload_id AND ps.name = p.pod_set
CROSS JOIN LATERAL jsonb_each_text(ps.requests) AS r(key, value)
JOIN nodes n ON n.name = p.node
GROUP BY p.node, r.key, n.allocatable
HAVING SUM(p.count * r.value::bigint) > COALESCE((n.allocatable ->> r.key)::bigint, 0)
""")


def overcommitted_nodes(engine: Engine) -> list[tuple[str, str, int, int]]:
    """(node, resource, used, capacity) for every node holding more than it has; one statement."""
    with engine.connect() as conn:
        return [
            (r.node, r.resource, int(r.used), int(r.capacity)) for r in conn.execute(OVERCOMMITTED)
        ]


def state_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT state::text AS s, count(*) AS n FROM workloads GROUP BY 1")
        )
        return {r.s: int(r.n) for r in rows}


def logs(processes: Sequence[ServeProcess]) -> str:
    return "\n".join(f"--- {p.replica} ---\n{p.log()}" for p in processes)


class StoreChecker(threading.Thread):
    """Polls Postgres every ``interval`` s: nodes holding more than they have, and the
    workload row count never falling (a lost row shows as a drop). A poll an outage
    refuses is counted as unanswered, not as a check."""

    def __init__(self, engine: Engine, *, interval: float = 0.25) -> None:
        super().__init__(name="checker", daemon=True)
        self.engine = engine
        self.interval = interval
        self.stop = threading.Event()
        self.violations: list[tuple[str, str, int, int]] = []
        self.fell: list[str] = []
        self.checks = 0
        self.unanswered = 0

    def run(self) -> None:
        seen = 0
        while not self.stop.wait(self.interval):
            try:
                over = overcommitted_nodes(self.engine)
                count = sum(state_counts(self.engine).values())
            except SQLAlchemyError:  # an outage: nothing to check
                self.unanswered += 1
                continue
            self.violations.extend(over)
            if count < seen:
                self.fell.append(f"workload rows fell from {seen} to {count}")
            seen = max(seen, count)
            self.checks += 1
