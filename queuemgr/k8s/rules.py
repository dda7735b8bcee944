"""The validating webhook's rules: why a labelled job could never run, in one clear message.

Why it exists: a job that names a queue that is not there, or asks for more
than any node holds, would otherwise sit suspended for ever. Each rule here
turns such a job into a sentence that says what is wrong and what to do.

The rules, for a job labelled ``queuemgr.io/queue-name: Q`` in namespace N:

1. the LocalQueue N/Q exists (else: the nearest names in N);
2. the ClusterQueue it feeds exists and admits namespace N;
3. a *GPU queue* gets GPU jobs: when every flavor of the ClusterQueue has
   nominal quota for a GPU resource (``nvidia.com/gpu`` by default), a job
   whose pods request no GPU at all is refused;
4. every pod fits on some node of the ClusterQueue's flavors: for each pod
   set, one pod's requests must fit within the allocatable of at least one
   schedulable node that carries a flavor's labels. While the store knows no
   such node at all (nodes not reported yet), this rule is skipped;
5. a running job (unsuspended and not finished, or admitted in the store)
   keeps its queue label and its gang (pod sets' names, counts and
   requests): changing them would escape the quota it was admitted with.

What must stay true: rules only read (the directory and the objects); each
problem is one sentence naming the numbers; quantities are compared exactly.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from queuemgr.core.directory import AdmittedView, ClusterQueueView
from queuemgr.core.model import PodSet
from queuemgr.core.resources import GPU, ResourceName, Resources, fits, format_quantity
from queuemgr.k8s.queue_directory import QueueDirectory
from queuemgr.k8s.selectors import LabelSelector


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookSettings:
    # Managed namespaces; the empty selector manages every namespace.
    namespace_selector: LabelSelector = field(default_factory=LabelSelector)
    gpu_resources: frozenset[ResourceName] = frozenset({GPU})
    # When the store cannot be read, allow a new job (it is created suspended
    # anyway, and the controller judges it later) instead of refusing it.
    allow_on_store_outage: bool = True


def render(vector: Resources) -> str:
    """``{gpu: 8, cpu: 96000}`` -> ``8 nvidia.com/gpu, 96 cpu`` (GPUs first, then by name)."""
    if not vector:
        return "nothing"
    ordered = sorted(vector, key=lambda r: (r != GPU, r))
    return ", ".join(f"{format_quantity(r, vector[r])} {r}" for r in ordered)


def _suggest(name: str, names: Sequence[str], namespace: str) -> str:
    if not names:
        return f'namespace "{namespace}" has no LocalQueues; ask an administrator for one'
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(f'"{c}"' for c in close) + "?"
    shown = ", ".join(f'"{n}"' for n in names[:10]) + (", ..." if len(names) > 10 else "")
    return f"its LocalQueues are {shown}"


def _gpu_queue(cq: ClusterQueueView, gpus: frozenset[ResourceName]) -> bool:
    return bool(cq.flavors) and all(any(f.nominal.get(r, 0) > 0 for r in gpus) for f in cq.flavors)


def _capacity_problem(ps: PodSet, cq: ClusterQueueView) -> str | None:
    shapes = [s for f in cq.flavors for s in f.node_shapes]
    if not shapes or any(fits(ps.requests, s) for s in shapes):
        return None
    offers = []
    for f in cq.flavors:
        if f.node_shapes:
            best = {r: max(s.get(r, 0) for s in f.node_shapes) for r in ps.requests}
            offers.append(f"{f.flavor} nodes hold at most {render(best)}")
    return (
        f'pod set "{ps.name}": one pod requests {render(ps.requests)}, more than any node of'
        f' ClusterQueue "{cq.name}" can hold ({"; ".join(offers)})'
    )


def queue_problems(
    *,
    namespace: str,
    queue: str,
    pod_sets: Sequence[PodSet],
    directory: QueueDirectory,
    settings: WebhookSettings,
) -> list[str]:
    """Rules 1-4 for a job sent to LocalQueue ``namespace/queue`` (may raise
    :class:`~queuemgr.k8s.queue_directory.DirectoryUnavailable`)."""
    cq_name = directory.local_queue(namespace, queue)
    if cq_name is None:
        hint = _suggest(queue, directory.local_queues(namespace), namespace)
        return [f'LocalQueue "{queue}" does not exist in namespace "{namespace}"; {hint}']
    cq = directory.cluster_queue(cq_name)
    if cq is None:
        return [
            f'LocalQueue "{namespace}/{queue}" feeds ClusterQueue "{cq_name}", which does not'
            " exist; ask an administrator to create it"
        ]
    problems = []
    if not cq.admits_namespace(namespace):
        allowed = ", ".join(f'"{n}"' for n in sorted(cq.namespaces or ()))
        problems.append(
            f'ClusterQueue "{cq.name}" (fed by LocalQueue "{queue}") does not admit namespace'
            f' "{namespace}"; it admits {allowed or "no namespace"}'
        )
    gpus = settings.gpu_resources
    if _gpu_queue(cq, gpus) and not any(ps.requests.get(r, 0) for ps in pod_sets for r in gpus):
        names = ", ".join(sorted(gpus))
        problems.append(
            f'LocalQueue "{queue}" feeds ClusterQueue "{cq.name}", which has only GPU quota, but'
            f" no pod of this job requests a GPU ({names}); set resources.limits on its"
            " containers, or use a queue for CPU work"
        )
    for ps in pod_sets:
        if (problem := _capacity_problem(ps, cq)) is not None:
            problems.append(problem)
    return problems


def gang(pod_sets: Sequence[PodSet]) -> dict[str, tuple[int, dict[ResourceName, int]]]:
    """What quota was charged for: per pod set, its count and per-pod requests."""
    return {ps.name: (ps.count, dict(ps.requests)) for ps in pod_sets}


def _describe(entry: tuple[int, Resources] | None) -> str:
    if entry is None:
        return "none"
    count, requests = entry
    return f"{count} x ({render(requests)})"


def running_edit_problems(
    *,
    old_queue: str | None,
    new_queue: str | None,
    old_pod_sets: Sequence[PodSet] | None,
    new_pod_sets: Sequence[PodSet],
    admitted: AdmittedView | None,
) -> list[str]:
    """Rule 5, for a job that is running (the caller decides that)."""
    problems = []
    was = old_queue if old_queue is not None else admitted.queue if admitted else None
    if new_queue != was:
        problems.append(
            f"the queue of a running job cannot change ({was or 'no queue'} -> "
            f"{new_queue or 'no queue'}): suspend it first or recreate it"
        )
    reference = (
        old_pod_sets if old_pod_sets is not None else admitted.pod_sets if admitted else None
    )
    if reference is not None:
        before, after = gang(reference), gang(new_pod_sets)
        changed = [
            f'pod set "{name}": {_describe(before.get(name))} -> {_describe(after.get(name))}'
            for name in sorted(before.keys() | after.keys())
            if before.get(name) != after.get(name)
        ]
        if changed:
            problems.append(
                "the pods of a running job cannot change, they hold the quota it was admitted"
                f" with ({'; '.join(changed)}): suspend it first or recreate it"
            )
    return problems
