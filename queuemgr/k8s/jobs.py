"""Which job kinds queuemgr manages, and the job object for a manifest.

Why it exists: the webhook and the controller receive objects of several
kinds; :func:`job_for` picks the implementation by ``apiVersion`` and
``kind``, and :data:`KINDS` is the one list the webhook configuration's rules
and the controller's watches are built from.

What must stay true: every kind here is a :class:`GenericJob` (the one
interface, as Kueue's jobframework has one): adding a kind is one class in
``kinds`` that says where its pods, suspend flag and conditions are, plus one
entry in :data:`KINDS`; an unknown kind is an :class:`UnknownKind` error,
never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queuemgr.k8s.jobframework import (
    ORIGINAL_SELECTORS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    QUEUE_LABEL,
    GenericJob,
)
from queuemgr.k8s.kinds import MIN_PARALLELISM, BatchJob, JobSet, PyTorchJob
from queuemgr.k8s.placement import Finished, Placement, PodSetAssignment

__all__ = [
    "KINDS",
    "MIN_PARALLELISM",
    "ORIGINAL_SELECTORS_ANNOTATION",
    "PLACEMENT_ANNOTATION",
    "QUEUE_LABEL",
    "BatchJob",
    "Finished",
    "GenericJob",
    "JobSet",
    "Placement",
    "PodSetAssignment",
    "PyTorchJob",
    "UnknownKind",
    "job_for",
]


KINDS: tuple[type[GenericJob], ...] = (BatchJob, JobSet, PyTorchJob)

_BY_TYPE = {(f"{k.GROUP}/{k.VERSION}", k.KIND): k for k in KINDS}


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
