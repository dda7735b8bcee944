"""Which job kinds queuemgr manages, and the job object for a manifest.

Why it exists: the webhook and the controller receive objects of several
kinds; :func:`job_for` picks the implementation by ``apiVersion`` and
``kind``, and :data:`KINDS` is the one list the webhook configuration's rules
and the controller's watches are built from.

What must stay true: every kind here is a :class:`GenericJob` (the one
interface, as Kueue's jobframework has one): adding a kind is one module in
``kinds`` that says where its pods, suspend flag and terminal state are, plus
one entry in :data:`KINDS`; an unknown kind is an :class:`UnknownKind` error,
never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queuemgr.k8s.jobframework import (
    ORIGINAL_SELECTORS_ANNOTATION,
    ORIGINAL_TOLERATIONS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    QUEUE_LABEL,
    GenericJob,
)
from queuemgr.k8s.kinds import MIN_PARALLELISM, BatchJob, JobSet, PyTorchJob, RayCluster, RayJob
from queuemgr.k8s.placement import Finished, Placement, PodSetAssignment

__all__ = [
    "KINDS",
    "MIN_PARALLELISM",
    "ORIGINAL_SELECTORS_ANNOTATION",
    "ORIGINAL_TOLERATIONS_ANNOTATION",
    "PLACEMENT_ANNOTATION",
    "QUEUE_LABEL",
    "BatchJob",
    "Finished",
    "GenericJob",
    "JobSet",
    "Placement",
    "PodSetAssignment",
    "PyTorchJob",
    "RayCluster",
    "RayJob",
    "UnknownKind",
    "job_for",
    "owned_by_managed_kind",
]


KINDS: tuple[type[GenericJob], ...] = (BatchJob, JobSet, PyTorchJob, RayJob, RayCluster)

_BY_TYPE = {(f"{k.GROUP}/{k.VERSION}", k.KIND): k for k in KINDS}


def owned_by_managed_kind(obj: Mapping[str, Any]) -> bool:
    """A child of a job queuemgr manages (a JobSet's Jobs, a RayJob's RayCluster and
    submitter Job): its parent is the gang, so the child is never queued itself."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and (ref.get("apiVersion"), ref.get("kind")) in _BY_TYPE:
            return True
    return False


class UnknownKind(ValueError):
    """An object of a kind queuemgr does not manage."""


def job_for(obj: Mapping[str, Any]) -> GenericJob:
    """The job object for a manifest of one of :data:`KINDS`."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    impl = _BY_TYPE.get((str(api_version), str(kind)))
    if impl is None:
        known = ", ".join(f"{a} {k}" for a, k in _BY_TYPE)
        raise UnknownKind(f"queuemgr manages {known}; not {api_version} {kind}")
    return impl(obj)
