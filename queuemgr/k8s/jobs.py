"""Which job kinds queuemgr manages, and the job object for a manifest.

Why it exists: the webhook and the controller receive objects of several
kinds; :func:`job_for` picks the implementation by ``apiVersion`` and
``kind``, and :data:`KINDS` is the one list the webhook configuration's rules
and the controller's watches are built from.

What must stay true: every kind here implements :class:`GenericJob`; an
unknown kind is an :class:`UnknownKind` error, never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from queuemgr.core.model import PodSet, Workload
from queuemgr.k8s.jobframework import (
    ORIGINAL_SELECTORS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    QUEUE_LABEL,
    JobBase,
)
from queuemgr.k8s.kinds import MIN_PARALLELISM, BatchJob, JobSet, PyTorchJob
from queuemgr.k8s.patch import Patch
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


class GenericJob(Protocol):
    """What queuemgr needs of any job kind (Kueue's GenericJob)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    def queue_name(self) -> str | None:
        """The LocalQueue from the ``queuemgr.io/queue-name`` label; None if not opted in."""
        ...

    def pod_sets(self) -> tuple[PodSet, ...]:
        """The gang: one pod set per pod template, exact per-pod requests."""
        ...

    def is_suspended(self) -> bool: ...

    def suspend(self) -> Patch:
        """The JSON Patch that suspends the job (empty if it is already suspended)."""
        ...

    def run_with(self, placement: Placement) -> Patch:
        """The JSON Patch that runs the job where ``placement`` says."""
        ...

    def finished(self) -> Finished | None:
        """The terminal condition, once the job has one."""
        ...

    def max_runtime(self) -> float | None: ...

    def workload(self, *, created_at: float | None = None, priority: int = 0) -> Workload: ...


KINDS: tuple[type[JobBase], ...] = (BatchJob, JobSet, PyTorchJob)

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
