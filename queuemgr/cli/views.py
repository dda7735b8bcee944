"""Read models for the CLI: queues with quota, usage and depth, built from one stored state.

Why it exists: ``cq list``, ``cq describe``, ``lq list`` and ``queues`` all
show the same numbers; computing them in one place from
:func:`queuemgr.store.repository.load_state` keeps them consistent with what
the scheduler itself would read (same snapshot, same usage arithmetic).

What must stay true: counts are those of the scheduler's own input, so the
pending workloads of a stopped ClusterQueue (which ``load_state`` withholds
from the core) are not counted; documents contain only JSON values, quantities in
canonical integer units; their keys are the schemas documented in
``docs/cli.md`` (add keys, never rename or remove them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from queuemgr.core.model import ClusterQueue, LocalQueue
from queuemgr.core.resources import total
from queuemgr.core.snapshot import Snapshot
from queuemgr.store import codec
from queuemgr.store.handle import Database
from queuemgr.store.repository import load_state
from queuemgr.store.state import StoredState

Doc = dict[str, Any]


@dataclass(frozen=True)
class View:
    state: StoredState
    snapshot: Snapshot

    def admitted_in_cq(self, name: str) -> int:
        return sum(1 for a in self.state.admitted if a.admission.cluster_queue == name)


def load_view(db: Database) -> View:
    state = load_state(db)
    return View(state=state, snapshot=state.snapshot())


def _lq_counts(view: View, lq: LocalQueue) -> tuple[int, int]:
    pending = sum(
        1 for w in view.state.pending if (w.namespace, w.queue) == (lq.namespace, lq.name)
    )
    admitted = sum(
        1
        for a in view.state.admitted
        if (a.workload.namespace, a.workload.queue) == (lq.namespace, lq.name)
    )
    return pending, admitted


def cq_doc(view: View, cq: ClusterQueue) -> Doc:
    base = codec.cluster_queue_json(cq, stopped=cq.name in view.state.stopped)
    usage = view.snapshot.usage.get(cq.name, {})
    for fq in base["flavors"]:
        fq["usage"] = codec.vector(usage.get(fq["flavor"], {}))
    pending = sum(1 for w in view.state.pending if view.state.config.route(w) == cq.name)
    lqs = sorted(
        f"{lq.namespace}/{lq.name}"
        for lq in view.state.config.local_queues.values()
        if lq.cluster_queue == cq.name
    )
    tree = view.state.config.quota_topology.tree
    return {
        **base,
        # Where it lends and borrows: "org/research/team", root first.
        "cohort_path": None if cq.cohort is None else tree.path(cq.cohort),
        "usage": codec.vector(total(usage.values())),
        "pending": pending,
        "admitted": view.admitted_in_cq(cq.name),
        "local_queues": lqs,
    }


def lq_doc(view: View, lq: LocalQueue) -> Doc:
    pending, admitted = _lq_counts(view, lq)
    cq = view.state.config.cluster_queues.get(lq.cluster_queue)
    doc: Doc = {
        "namespace": lq.namespace,
        "name": lq.name,
        "cluster_queue": lq.cluster_queue,
        "cluster_queue_exists": cq is not None,
        "pending": pending,
        "admitted": admitted,
    }
    if cq is not None:
        full = cq_doc(view, cq)
        doc["cohort"] = full["cohort_path"]  # where it borrows: its cohort's path in the tree
        doc["quota"] = {fq["flavor"]: fq["nominal"] for fq in full["flavors"]}
        doc["usage"] = full["usage"]
        doc["cluster_queue_pending"] = full["pending"]
        doc["stopped"] = full["stopped"]
    return doc


def nominal_total(cq_document: Doc) -> dict[str, int]:
    out: dict[str, int] = {}
    for fq in cq_document["flavors"]:
        for r, v in fq["nominal"].items():
            out[r] = out.get(r, 0) + v
    return out
