"""The ``simulated`` cluster backend: nodes from a file, gangs that run for their runtime.

Why it exists: a machine without a cluster (a laptop, CI, ``queuemgr demo``)
still runs the real service, store and loop; only the cluster is pretend.

The cluster file uses the scenario format (docs/simulate.md): ``flavors`` and
``nodes`` are required, ``cohorts``, ``cluster_queues`` and ``local_queues``
are optional and are upserted into the store at start, like an admin would;
``workloads`` are refused (submit them instead). It is parsed by
:mod:`queuemgr.spec.scenario`, so every error names its YAML path.

What must stay true: an admitted gang "runs" in real (clock) time for its
declared runtime: the workload's ``max_runtime`` when set, else the
configured ``default_runtime``; then the next poll reports it finished,
exactly once. Stopping a gang (an eviction) removes it without a finish.
"""

from __future__ import annotations

import heapq
import threading
from pathlib import Path

from queuemgr.controller.ports import Clock
from queuemgr.core.lifecycle import RunEnd
from queuemgr.core.model import AdmittedWorkload, Node, WorkloadId
from queuemgr.core.snapshot import Config
from queuemgr.spec.checks import ScenarioError, read_yaml
from queuemgr.spec.scenario import parse_scenario


def load_cluster_file(path: Path) -> Config:
    """The flavors, nodes and (optional) queues of a cluster file; ScenarioError if bad."""
    raw = read_yaml(path, "cluster file", ScenarioError)
    if isinstance(raw, dict):
        if raw.get("workloads"):
            raise ScenarioError("workloads: a cluster file lists no workloads; submit them")
        if "scheduler" in raw:
            # One policy, in one place: serve would otherwise ignore it silently and
            # decide differently from `simulate` on the same file.
            raise ScenarioError(
                "scheduler: a cluster file sets no scheduler policy; put these knobs under "
                "the service configuration's scheduler: key (docs/operations.md)"
            )
        raw = {"cluster_queues": [], **raw}
    return parse_scenario(raw).config


class SimulatedBackend:
    start_concurrency = 1  # a start is a dictionary write

    def __init__(self, nodes: list[Node], clock: Clock, *, default_runtime: float) -> None:
        self._nodes = list(nodes)
        self._clock = clock
        self._default_runtime = default_runtime
        self._lock = threading.Lock()
        self._admitted: dict[WorkloadId, float] = {}  # the admission each run started under
        self._ends: dict[WorkloadId, float] = {}
        # (end time, workload id); entries of stopped gangs are skipped lazily.
        self._heap: list[tuple[float, WorkloadId]] = []

    def runtime_of(self, admitted: AdmittedWorkload) -> float:
        declared = admitted.workload.max_runtime
        return self._default_runtime if declared is None else declared

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def start(self, admitted: AdmittedWorkload) -> None:
        wid = admitted.workload.id
        with self._lock:
            if wid in self._ends:
                return
            # A gang adopted after a failover keeps its original end time.
            end = max(self._clock.now(), admitted.admitted_at + self.runtime_of(admitted))
            self._ends[wid] = end
            self._admitted[wid] = admitted.admitted_at
            heapq.heappush(self._heap, (end, wid))

    def stop(self, workload_id: WorkloadId) -> None:
        with self._lock:
            self._ends.pop(workload_id, None)
            self._admitted.pop(workload_id, None)

    def running(self) -> set[WorkloadId]:
        with self._lock:
            return set(self._ends)

    def poll_finished(self, now: float) -> list[RunEnd]:
        done: list[RunEnd] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now:
                end, wid = heapq.heappop(self._heap)
                if self._ends.get(wid) == end:
                    del self._ends[wid]
                    done.append(RunEnd(workload=wid, admitted_at=self._admitted.pop(wid)))
        return done

    def next_finish(self) -> float | None:
        with self._lock:
            while self._heap and self._ends.get(self._heap[0][1]) != self._heap[0][0]:
                heapq.heappop(self._heap)
            return self._heap[0][0] if self._heap else None
