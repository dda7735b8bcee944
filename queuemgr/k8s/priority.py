"""A job's scheduling priority, from the Kubernetes PriorityClass it names.

Why it exists: tenants already give their pods a ``priorityClassName`` for
the kube-scheduler; queuemgr orders queues and picks preemption victims by
the same number, as Kueue does, so one class means one priority everywhere.

Where the name comes from, first match wins:

1. the job's label ``queuemgr.io/priority-class`` (a priority for queueing
   alone, without changing the pods' own);
2. the ``priorityClassName`` of the first pod template that sets one;
3. none: the value of the PriorityClass marked ``globalDefault``, else 0.

What must stay true: a name with no PriorityClass is an error naming the
field and the name (the job then waits with that message, as Kubernetes
would refuse its pods), never a silent 0; the value is an exact integer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from queuemgr.k8s.jobframework import GenericJob
from queuemgr.k8s.manifest import ManifestError


def job_priority(job: GenericJob, classes: Iterable[Mapping[str, Any]]) -> int:
    """``job``'s priority given the cluster's PriorityClass objects."""
    values: dict[str, int] = {}
    default = 0
    for pc in classes:
        name = pc.get("metadata", {}).get("name")
        value = pc.get("value")
        if not isinstance(name, str) or not isinstance(value, int):
            continue  # the API server validates both; a torn object is skipped
        values[name] = value
        if pc.get("globalDefault") is True:
            default = value
    named = job.priority_class_name()
    if named is None:
        return default
    name, path = named
    if name not in values:
        raise ManifestError(path, name, "no PriorityClass is named")
    return values[name]
