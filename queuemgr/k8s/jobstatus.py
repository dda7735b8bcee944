"""Why a job waits, written on the job itself, so ``kubectl describe`` tells the tenant.

Why it exists: a tenant looks at their Job, not at queuemgr. Each job
carries annotations (``queuemgr.io/reason``, ``queuemgr.io/position``,
``queuemgr.io/eta``), which every kind accepts and ``kubectl describe``
prints, and, where the kind's status takes them, two conditions:
``QueuemgrPending`` (True while it waits) and ``QueuemgrAdmitted`` (True
while admitted), with the reason code and the message.

What must stay true: the patches are built against the object they will be
applied to and are empty when nothing would change (a status write costs
an API call, so callers write only on change); conditions keep their
``lastTransitionTime`` unless their status flips; the conditions patch is
guarded by the object's ``resourceVersion`` (the job controller owns the
rest of the list and must never lose an update to us).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queuemgr.k8s.jobframework import set_annotations
from queuemgr.k8s.patch import Patch, guard, remove_value, set_value

REASON_ANNOTATION = "queuemgr.io/reason"
POSITION_ANNOTATION = "queuemgr.io/position"
ETA_ANNOTATION = "queuemgr.io/eta"
PENDING_CONDITION = "QueuemgrPending"
ADMITTED_CONDITION = "QueuemgrAdmitted"
MAX_MESSAGE = 1000  # characters kept of a message (annotations and conditions stay small)


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueStatus:
    """What queuemgr says about one job now."""

    admitted: bool
    reason: str  # a stable code: QuotaExceeded, Admitted, Preempted, PodsReadyTimeout...
    message: str
    position: str | None = None  # "2 in LocalQueue default, 5 in ClusterQueue team-a"
    eta: str | None = None  # RFC 3339, when an ETA is known

    @property
    def summary(self) -> str:
        text = f"{self.reason}: {self.message}" if self.message else self.reason
        return text[:MAX_MESSAGE]


def annotation_patch(
    obj: Mapping[str, Any], status: QueueStatus, extra: Mapping[str, str] | None = None
) -> Patch:
    """Set the reason, position and ETA annotations (dropping the ones that no longer apply),
    and any ``extra`` ones, in one go."""
    notes = dict((obj.get("metadata") or {}).get("annotations") or {})
    updates = {REASON_ANNOTATION: status.summary, **(extra or {})}
    drops = []
    for key, value in ((POSITION_ANNOTATION, status.position), (ETA_ANNOTATION, status.eta)):
        if value is None:
            drops.append(key)
        else:
            updates[key] = value
    changed = {k: v for k, v in updates.items() if notes.get(k) != v}
    patch = set_annotations(obj, changed) if changed else Patch()
    for key in drops:
        patch += remove_value(obj, ("metadata", "annotations", key))
    return patch


def _condition(kind: str, true: bool, status: QueueStatus, now: str, old: Any) -> dict[str, Any]:
    flag = "True" if true else "False"
    since = old.get("lastTransitionTime") if isinstance(old, Mapping) else None
    if not isinstance(old, Mapping) or old.get("status") != flag or not since:
        since = now
    return {
        "type": kind,
        "status": flag,
        "reason": status.reason,
        "message": status.message[:MAX_MESSAGE],
        "lastTransitionTime": since,
        "lastProbeTime": since,
    }


# What every condition schema keeps: batch/v1's JobCondition also has
# lastProbeTime, but metav1.Condition (JobSet, KubeRay) and the training
# operator's JobCondition prune it, so it must not make a written condition
# look changed.
_COMPARED = ("type", "status", "reason", "message", "lastTransitionTime")


def _kept(condition: Any) -> dict[str, Any] | None:
    if not isinstance(condition, Mapping):
        return None
    return {key: condition.get(key) for key in _COMPARED}


def has_conditions(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj``'s status holds queuemgr's conditions (a schema without
    ``status.conditions``, such as RayJob's, prunes them and answers 200)."""
    current = (obj.get("status") or {}).get("conditions") or []
    return any(isinstance(c, Mapping) and c.get("type") == PENDING_CONDITION for c in current)


def condition_patch(obj: Mapping[str, Any], status: QueueStatus, now: str) -> Patch:
    """Replace the two queuemgr conditions in ``status.conditions`` (for the status subresource).

    ``now`` is an RFC 3339 timestamp, used for conditions whose status flips.
    """
    current = list((obj.get("status") or {}).get("conditions") or [])
    by_type = {c.get("type"): c for c in current if isinstance(c, Mapping)}
    wanted = [
        _condition(
            PENDING_CONDITION, not status.admitted, status, now, by_type.get(PENDING_CONDITION)
        ),
        _condition(
            ADMITTED_CONDITION, status.admitted, status, now, by_type.get(ADMITTED_CONDITION)
        ),
    ]
    if all(_kept(by_type.get(c["type"])) == _kept(c) for c in wanted):
        return Patch()
    mine = {PENDING_CONDITION, ADMITTED_CONDITION}
    merged = [c for c in current if not (isinstance(c, Mapping) and c.get("type") in mine)]
    merged.extend(wanted)
    version = (obj.get("metadata") or {}).get("resourceVersion")
    patch = guard(("metadata", "resourceVersion"), version) if version else Patch()
    return patch + set_value(obj, ("status", "conditions"), merged)
