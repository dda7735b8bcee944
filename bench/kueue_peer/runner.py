"""Kueue's runner against Jobs: record each Job's events, complete it after its runtime.

Why it exists: Kueue's scheduler benchmark has a recorder (every Workload's
first event, admission, eviction, finish) and a controller that finishes a
Workload once its runtime has passed since admission. queuemgr admits Jobs,
and without a job controller no Job ever ends, so this plays both parts for
``run_queuemgr.py``, fed by a watch of the labelled Jobs.

What must stay true:

- like Kueue's recorder, time to admission runs from the first watch event
  of a Job to the last time it went from suspended to running (a
  re-admission after an eviction overwrites it), and an eviction is
  running -> suspended;
- a Job is completed by one status patch (``startTime``, ``completionTime``,
  ``succeeded: 1``, ``SuccessCriteriaMet`` and ``Complete``: what
  kube-apiserver 1.36 requires of a finished Job), only if it still runs on
  the admission it was scheduled for: the patch tests ``spec.suspend`` and
  the placement annotation, so a Job preempted meanwhile is left alone (the
  apiserver refuses with 422);
- five workers complete Jobs, as Kueue's controller reconciles five
  Workloads at once; a failed patch is retried, then reported.
"""

from __future__ import annotations

import datetime as dt
import heapq
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.kueue_peer.stream import CLASS_LABEL, RUNTIME_LABEL, drain
from queuemgr.core.resources import parse_quantity
from queuemgr.k8s.jobs import PLACEMENT_ANNOTATION
from queuemgr.k8s.reflector import Change


def _finished(obj: Mapping[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


def _rfc3339(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class JobState:
    cls: str
    cpu: float
    runtime: float
    first: float
    running_since: float | None = None
    admitted_at: float | None = None  # the last admission
    admitted_wall: float | None = None  # the same, on the wall clock (the store's)
    evictions: int = 0
    finished: float | None = None
    cpu_seconds: float = 0.0


class Runner:
    """Kueue's runner against Jobs: records every Job's events, completes it after its runtime."""

    def __init__(
        self,
        batch: client.BatchV1Api,
        lookup: Callable[[str], dict[str, Any] | None],
        expected: int,
        workers: int = 5,
    ) -> None:
        self.batch, self.lookup, self.expected = batch, lookup, expected
        self.jobs: dict[str, JobState] = {}
        self.done = threading.Event()
        self.patches = 0  # status patches sent
        self.stale = 0  # refused because the Job was no longer on that admission
        self.errors: list[str] = []
        self._finished = 0
        self._heap: list[tuple[float, str, str | None, float]] = []
        self._cv = threading.Condition()
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._work, name=f"runner-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    # -- the recorder: called from the watch's one thread ------------------------------
    def on_event(self, change: Change, obj: dict[str, Any]) -> None:
        if change is Change.DELETED:
            return
        now = time.monotonic()
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        state = self.jobs.get(key)
        if state is None:
            labels = meta.get("labels") or {}
            requests = obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
            state = self.jobs[key] = JobState(
                cls=labels.get(CLASS_LABEL, "?"),
                cpu=parse_quantity(requests["cpu"], resource="cpu", field="cpu") / 1000,
                runtime=int(labels.get(RUNTIME_LABEL, "0")) / 1000,
                first=now,
            )
        if state.finished is not None:
            return
        if _finished(obj):
            state.finished = now
            self._stop_running(state, now)
            self._finished += 1
            if self._finished >= self.expected:
                self.done.set()
            return
        suspended = bool(obj["spec"].get("suspend"))
        if not suspended and state.running_since is None:
            state.running_since = state.admitted_at = now
            state.admitted_wall = time.time()
            note = (meta.get("annotations") or {}).get(PLACEMENT_ANNOTATION)
            with self._cv:
                heapq.heappush(self._heap, (now + state.runtime, key, note, state.admitted_wall))
                self._cv.notify()
        elif suspended and state.running_since is not None:
            state.evictions += 1
            self._stop_running(state, now)

    @staticmethod
    def _stop_running(state: JobState, now: float) -> None:
        if state.running_since is not None:
            state.cpu_seconds += state.cpu * (now - state.running_since)
            state.running_since = None

    # -- completing Jobs ---------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._stopping and (
                    not self._heap or self._heap[0][0] > time.monotonic()
                ):
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cv.wait(wait)
                if self._stopping:
                    return
                _, key, note, started = heapq.heappop(self._heap)
            self._complete(key, note, started)

    def _complete(self, key: str, note: str | None, started: float) -> None:
        obj = self.lookup(key)
        if obj is None or obj["spec"].get("suspend") or _finished(obj):
            return
        namespace, name = key.split("/", 1)
        now = _rfc3339(time.time())
        condition = {
            "status": "True",
            "reason": "CompletionsReached",
            "message": "Reached expected number of succeeded pods",
            "lastTransitionTime": now,
            "lastProbeTime": now,
        }
        conditions = [{"type": t, **condition} for t in ("SuccessCriteriaMet", "Complete")]
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/spec/suspend", "value": False}]
        if note is not None:
            path = "/metadata/annotations/" + PLACEMENT_ANNOTATION.replace("/", "~1")
            ops.append({"op": "test", "path": path, "value": note})
        ops += [
            {"op": "add", "path": "/status/startTime", "value": _rfc3339(started)},
            {"op": "add", "path": "/status/completionTime", "value": now},
            {"op": "add", "path": "/status/succeeded", "value": 1},
        ]
        if (obj.get("status") or {}).get("conditions"):
            ops += [{"op": "add", "path": "/status/conditions/-", "value": c} for c in conditions]
        else:
            ops.append({"op": "add", "path": "/status/conditions", "value": conditions})
        for attempt in range(5):
            self.patches += 1
            try:
                drain(
                    self.batch.patch_namespaced_job_status(
                        name, namespace, ops, _preload_content=False
                    )
                )
                return
            except ApiException as error:
                if error.status in (404, 409, 422):
                    self.stale += 1  # evicted, re-admitted or deleted meanwhile
                    return
                last = f"complete {key}: HTTP {error.status} {error.reason}"
            except OSError as error:
                last = f"complete {key}: {error}"
            time.sleep(0.2 * 2**attempt)
        self.errors.append(last)

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        for thread in self._threads:
            thread.join(5)

    # -- the summary -------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        states = list(self.jobs.values())
        out: dict[str, Any] = {"count": len(states)}
        for cls in dict.fromkeys(s.cls for s in states):
            waits = [
                s.admitted_at - s.first
                for s in states
                if s.cls == cls and s.admitted_at is not None
            ]
            out[cls] = sum(waits) / len(waits) if waits else None
        out["evictions"] = sum(s.evictions for s in states)
        ends = [s.finished for s in states if s.finished is not None]
        out["first"] = min((s.first for s in states), default=None)
        out["last"] = max(ends, default=None)
        out["cpu_seconds"] = sum(s.cpu_seconds for s in states)
        return out

    def csv(self) -> str:
        lines = ["key,class,ms to admitted,ms to finish,num evictions"]
        for key, s in self.jobs.items():
            admit = "" if s.admitted_at is None else f"{(s.admitted_at - s.first) * 1000:.0f}"
            end = "" if s.finished is None else f"{(s.finished - s.first) * 1000:.0f}"
            lines.append(f"{key},{s.cls},{admit},{end},{s.evictions}")
        return "\n".join(lines) + "\n"
