"""One interface for every job kind queuemgr manages, like Kueue's GenericJob.

Why it exists: the controller and the webhook must treat a ``batch/v1`` Job, a
JobSet and a PyTorchJob alike: read the gang (:meth:`GenericJob.pod_sets`), tell
whether it is held (:meth:`~GenericJob.is_suspended`), hold it
(:meth:`~GenericJob.suspend`), run it where the scheduler placed it
(:meth:`~GenericJob.run_with`) and tell when it is done
(:meth:`~GenericJob.finished`). A kind only says where its pod templates, its
``suspend`` field and its terminal conditions are.

What must stay true:

- a job opts in with the label ``queuemgr.io/queue-name``; an empty value is
  no opt-in;
- methods read the object and return :class:`~queuemgr.k8s.patch.Patch`es;
  they never mutate it, and applying the patch of ``suspend()`` or
  ``run_with()`` is the caller's job;
- ``run_with`` sets each pod template's node selector to the one the user
  wrote plus the flavor's labels (and the topology domain, if any), records
  the user's selectors once in an annotation so that a later admission to
  another flavor starts from them again, and records the placement; it adds
  the flavor's tolerations to each template's own (none twice), recording the
  user's tolerations once in an annotation the same way; ``suspend`` suspends,
  drops the placement record and puts the user's tolerations back exactly,
  except on a kind whose running template is immutable (a ``batch/v1`` Job):
  there that waits for a ``suspend()`` of the suspended job, and meanwhile the
  next ``run_with`` starts from the recorded ones; it never restores the node
  selectors;
- errors in the object are :class:`~queuemgr.k8s.manifest.ManifestError`\\ s
  naming the JSON path.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, cast

from queuemgr.core.model import PodSet, Workload
from queuemgr.k8s import manifest as m
from queuemgr.k8s.dra import NO_CHARGE, DeviceCharger
from queuemgr.k8s.manifest import ManifestError
from queuemgr.k8s.patch import Patch, Token, remove_value, set_value
from queuemgr.k8s.placement import Finished, Placement, toleration_json
from queuemgr.k8s.podspec import pod_set

QUEUE_LABEL = "queuemgr.io/queue-name"
PRIORITY_LABEL = "queuemgr.io/priority-class"
PLACEMENT_ANNOTATION = "queuemgr.io/placement"
ORIGINAL_SELECTORS_ANNOTATION = "queuemgr.io/original-node-selectors"
# Count fields a partial admission scaled down, as they were, so that suspension restores them.
ORIGINAL_COUNTS_ANNOTATION = "queuemgr.io/original-counts"
# Each pinned template's tolerations before the flavor's were added (null: the field was
# absent), so that suspension restores them and another flavor's admission starts anew.
ORIGINAL_TOLERATIONS_ANNOTATION = "queuemgr.io/original-tolerations"
# Kueue's limit on a workload's pod sets; the store's queuemgr_submit holds the same.
MAX_POD_SETS = 8


def parse_timestamp(value: str, path: str) -> float:
    """An RFC 3339 timestamp (``2025-01-02T03:04:05Z``) as seconds since the epoch."""
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ManifestError(path, value, "bad timestamp") from None


@dataclass(frozen=True, kw_only=True, slots=True)
class Template:
    """One pod set's pod template: its pod set name, count and JSON location."""

    name: str
    count: int
    tokens: tuple[Token, ...]  # path to the PodTemplateSpec
    min_count: int | None = None
    # Where the count lives, when a partial admission may set it (one pod per unit).
    count_field: tuple[Token, ...] | None = None
    # The template the kind's controller uses when the object has none at ``tokens``
    # (a RayJob's default submitter): charged for, but nothing is written into it.
    default: Mapping[str, Any] | None = None

    @property
    def path(self) -> str:
        return json_path(self.tokens)


def json_path(tokens: Sequence[Token]) -> str:
    """``("spec", "replicatedJobs", 0)`` -> ``spec.replicatedJobs[0]`` (as errors name it)."""
    out = ""
    for t in tokens:
        out = m.child(out, t)
    return out


class GenericJob:
    """What queuemgr needs of any job kind (Kueue's GenericJob), with the shared half of
    every kind written once; a subclass per kind (``kinds``) says where things are."""

    GROUP: ClassVar[str]
    VERSION: ClassVar[str]
    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SUSPEND: ClassVar[tuple[str, ...]]  # path of the suspend flag
    SUCCEEDED: ClassVar[str]  # terminal condition types
    FAILED: ClassVar[str]
    # The API server refuses a change of the pod templates in the request that suspends
    # the running job (a ``batch/v1`` Job's scheduling directives may change only while
    # it is suspended), so ``suspend`` restores the tolerations only once it is released
    # (``template_released``), and the job sync finishes it then (``leftover_restore``).
    TEMPLATE_FROZEN_WHILE_RUNNING: ClassVar[bool] = False

    def __init__(self, obj: Mapping[str, Any]) -> None:
        if not isinstance(obj, Mapping):
            raise ManifestError("", obj, "expected an object, got")
        self.obj = obj

    # -- kind-specific --------------------------------------------------------

    def kind_templates(self) -> list[Template]:
        """The pod sets as the object says now (a partial admission may have scaled them)."""
        raise NotImplementedError

    def max_runtime(self) -> float | None:
        """The user's declared time limit in seconds, if the kind has one."""
        return None

    # -- shared ---------------------------------------------------------------

    def templates(self) -> list[Template]:
        """The pod sets, each with the count it was submitted with."""
        originals = self._original_counts()
        if not originals:
            return self.kind_templates()
        restored: Any = copy.deepcopy(dict(self.obj))
        for t in self.kind_templates():
            if t.count_field is not None and t.name in originals:
                _put(restored, t.count_field, originals[t.name])
        return type(self)(restored).kind_templates()

    @property
    def namespace(self) -> str:
        return m.string(m.mapping(self.obj, "metadata", ""), "namespace", "metadata")

    @property
    def name(self) -> str:
        return m.string(m.mapping(self.obj, "metadata", ""), "name", "metadata")

    def queue_name(self) -> str | None:
        return m.label_map(self.obj).get(QUEUE_LABEL) or None

    def priority_class_name(self) -> tuple[str, str] | None:
        """The PriorityClass named, and the JSON path naming it: the
        ``queuemgr.io/priority-class`` label, else the first pod template's
        ``priorityClassName``; None when neither is set."""
        label = m.label_map(self.obj).get(PRIORITY_LABEL)
        if label:
            return label, f"metadata.labels[{PRIORITY_LABEL}]"
        for t in self.templates():
            spec = self._at(t.tokens).get("spec")
            name = spec.get("priorityClassName") if isinstance(spec, Mapping) else None
            if name:
                path = f"{t.path}.spec.priorityClassName"
                if not isinstance(name, str):
                    raise ManifestError(path, name, "expected a string, got")
                return name, path
        return None

    def pod_sets(self, devices: DeviceCharger | None = None) -> tuple[PodSet, ...]:
        """The job's pod sets; with ``devices``, each pod is charged its DRA claims."""
        out = []
        templates = self.templates()
        if len(templates) > MAX_POD_SETS:
            raise ManifestError(
                json_path(templates[MAX_POD_SETS].tokens),
                len(templates),
                f"a job has at most {MAX_POD_SETS} pod sets (templates), got",
            )
        for t in templates:
            parent = self._at(t.tokens[:-1])
            if t.default is not None and t.tokens[-1] not in parent:
                template: Mapping[str, Any] = t.default
            else:
                template = m.required_mapping(parent, str(t.tokens[-1]), json_path(t.tokens[:-1]))
            charge = NO_CHARGE
            if devices is not None:
                spec = m.required_mapping(template, "spec", t.path)
                charge = devices.charge(spec, m.child(t.path, "spec"), self.namespace)
            out.append(
                pod_set(
                    t.name,
                    t.count,
                    template,
                    t.path,
                    min_count=t.min_count,
                    devices=charge.requests,
                    quota_only=charge.quota_only,
                )
            )
        return tuple(out)

    def template(self, t: Template) -> Mapping[str, Any]:
        """Pod set ``t``'s PodTemplateSpec: the object's, else the kind's default one."""
        if t.default is not None and t.tokens[-1] not in self._at(t.tokens[:-1]):
            return t.default
        return self._at(t.tokens)

    def in_object(self, t: Template) -> bool:
        """Whether template ``t`` is in the object; a kind's default one (a RayJob's
        submitter) is not: its controller writes the pods, which carry none of our labels."""
        return t.default is None or t.tokens[-1] in self._at(t.tokens[:-1])

    def is_suspended(self) -> bool:
        holder = self._at(self.SUSPEND[:-1])
        return m.boolean(holder, self.SUSPEND[-1], json_path(self.SUSPEND[:-1]), default=False)

    def suspend(self) -> Patch:
        patch = set_value(self.obj, self.SUSPEND, True)
        counts = self._original_counts()
        if counts:
            for t in self.kind_templates():
                if t.count_field is not None and t.name in counts:
                    value = counts[t.name]
                    patch += (
                        remove_value(self.obj, t.count_field)
                        if value is None
                        else set_value(self.obj, t.count_field, value)
                    )
            patch += remove_value(self.obj, ("metadata", "annotations", ORIGINAL_COUNTS_ANNOTATION))
        if self.template_released():
            patch += self._restore_tolerations()
        return patch + remove_value(self.obj, ("metadata", "annotations", PLACEMENT_ANNOTATION))

    def template_released(self) -> bool:
        """Whether the API server lets the pod templates' scheduling directives change now.

        Always for a kind whose templates may change while it runs. For one whose are
        frozen (``batch/v1``): once suspended with no active pods, and either never
        started or marked ``Suspended`` by its controller."""
        if not self.TEMPLATE_FROZEN_WHILE_RUNNING:
            return True
        if not self.is_suspended():
            return False
        status = m.mapping(self.obj, "status", "")
        if status.get("active"):
            return False
        return status.get("startTime") is None or self._true_condition("Suspended") is not None

    def leftover_restore(self) -> Patch:
        """What a suspended job still has to put back: the recorded tolerations that a
        frozen template kept through its suspension, once it is released; else nothing."""
        if not self.is_suspended() or not self.template_released():
            return Patch()
        return self._restore_tolerations()

    def run_with(self, placement: Placement) -> Patch:
        originals = self._original_selectors()
        tolerations = self._original_tolerations()
        added = [toleration_json(t) for t in placement.tolerations]
        patch = Patch()
        notes: dict[str, str] = {}
        scaled: dict[str, int | None] = {}
        for t in self.templates():
            assignment = placement.assignment(t.name)
            if (
                t.count_field is not None
                and assignment is not None
                and 0 < assignment.pods < t.count
            ):
                patch += set_value(self.obj, t.count_field, assignment.pods)
                scaled[t.name] = self._value_at(t.count_field)
            if t.default is not None and t.tokens[-1] not in self._at(t.tokens[:-1]):
                continue  # the kind's controller writes that template; nothing to pin
            selector = dict(originals.get(t.name, {}))
            selector.update(placement.node_labels)
            if assignment is not None and assignment.topology is not None:
                selector[assignment.topology[0]] = assignment.topology[1]
            patch += set_value(self.obj, (*t.tokens, "spec", "nodeSelector"), selector)
            patch += self._set_tolerations(t, tolerations.get(t.name), added)
        notes[PLACEMENT_ANNOTATION] = placement.record()
        if scaled and ORIGINAL_COUNTS_ANNOTATION not in m.annotation_map(self.obj):
            notes[ORIGINAL_COUNTS_ANNOTATION] = json.dumps(scaled, sort_keys=True)
        if ORIGINAL_SELECTORS_ANNOTATION not in m.annotation_map(self.obj):
            recorded = json.dumps(originals, sort_keys=True, separators=(",", ":"))
            notes[ORIGINAL_SELECTORS_ANNOTATION] = recorded
        if added and ORIGINAL_TOLERATIONS_ANNOTATION not in m.annotation_map(self.obj):
            recorded = json.dumps(tolerations, sort_keys=True, separators=(",", ":"))
            notes[ORIGINAL_TOLERATIONS_ANNOTATION] = recorded
        patch += set_annotations(self.obj, notes)
        return patch + set_value(self.obj, self.SUSPEND, False)

    def finished(self) -> Finished | None:
        found = self._true_condition(self.SUCCEEDED, self.FAILED)
        if found is None:
            return None
        cond, path = found
        return Finished(
            succeeded=m.string(cond, "type", path) == self.SUCCEEDED,
            reason=m.string(cond, "reason", path),
            message=m.string(cond, "message", path),
        )

    def _true_condition(self, *kinds: str) -> tuple[Mapping[str, Any], str] | None:
        """The first status condition of one of ``kinds`` that is True, with its path."""
        status = m.mapping(self.obj, "status", "")
        for i, cond in enumerate(m.sequence(status, "conditions", "status")):
            path = f"status.conditions[{i}]"
            if not isinstance(cond, Mapping):
                raise ManifestError(path, cond, "expected an object, got")
            if m.string(cond, "type", path) in kinds and m.string(cond, "status", path) == "True":
                return cond, path
        return None

    def workload(
        self,
        *,
        created_at: float | None = None,
        priority: int = 0,
        devices: DeviceCharger | None = None,
    ) -> Workload:
        """The core workload for this job (``created_at`` defaults to its creation time;
        ``devices`` charges its pods' DRA claims)."""
        if created_at is None:
            stamp = m.string(m.mapping(self.obj, "metadata", ""), "creationTimestamp", "metadata")
            created_at = parse_timestamp(stamp, "metadata.creationTimestamp") if stamp else 0.0
        return Workload(
            namespace=self.namespace,
            name=self.name,
            queue=self.queue_name() or "",
            pod_sets=self.pod_sets(devices),
            priority=priority,
            created_at=created_at,
            max_runtime=self.max_runtime(),
        )

    # -- helpers --------------------------------------------------------------

    def _at(self, tokens: Sequence[Token]) -> Mapping[str, Any]:
        """The object at ``tokens``; empty where a member is absent (list items must exist)."""
        current: Any = self.obj
        path = ""
        for token in tokens:
            path = m.child(path, token)
            if isinstance(token, int):
                if not isinstance(current, list) or not 0 <= token < len(current):
                    raise ManifestError(path, None, "missing:")
                current = current[token]
            elif isinstance(current, Mapping):
                current = current.get(token)
                if current is None:
                    return {}
            else:
                raise ManifestError(path, current, "expected an object, got")
        if not isinstance(current, Mapping):
            raise ManifestError(path, current, "expected an object, got")
        return cast(Mapping[str, Any], current)

    def _original_counts(self) -> dict[str, int | None]:
        """Pod set -> its count field's value before a partial admission scaled it down
        (None: the field was absent); empty when nothing was scaled."""
        recorded = m.annotation_map(self.obj).get(ORIGINAL_COUNTS_ANNOTATION)
        if recorded is None:
            return {}
        path, raw = _recorded(ORIGINAL_COUNTS_ANNOTATION, recorded)
        if not isinstance(raw, dict) or not all(
            v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
            for v in raw.values()
        ):
            raise ManifestError(path, recorded, "expected {pod set: count >= 1 or null}, got")
        return {str(k): v for k, v in raw.items()}

    def _value_at(self, tokens: Sequence[Token]) -> int | None:
        value = self._at(tokens[:-1]).get(str(tokens[-1]))
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def _original_selectors(self) -> dict[str, dict[str, str]]:
        recorded = m.annotation_map(self.obj).get(ORIGINAL_SELECTORS_ANNOTATION)
        if recorded is None:
            return {
                t.name: m.string_map(
                    self._at((*t.tokens, "spec")), "nodeSelector", f"{t.path}.spec"
                )
                for t in self.templates()
            }
        path, raw = _recorded(ORIGINAL_SELECTORS_ANNOTATION, recorded)
        if not isinstance(raw, dict) or not all(
            isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
            for v in raw.values()
        ):
            raise ManifestError(path, recorded, "expected {pod set: {label: value}}, got")
        return {str(k): dict(v) for k, v in raw.items()}

    def _pinned(self) -> list[Template]:
        """The templates ``run_with`` writes into: those the object holds."""
        return [
            t
            for t in self.templates()
            if t.default is None or t.tokens[-1] in self._at(t.tokens[:-1])
        ]

    def _original_tolerations(self) -> dict[str, list[Any] | None]:
        """Pinned template -> its tolerations as the user wrote them (None: no such field):
        as recorded by ``run_with``, else as the templates hold them now."""
        recorded = m.annotation_map(self.obj).get(ORIGINAL_TOLERATIONS_ANNOTATION)
        if recorded is None:
            out: dict[str, list[Any] | None] = {}
            for t in self._pinned():
                raw = self._at((*t.tokens, "spec")).get("tolerations")
                if raw is not None and not isinstance(raw, list):
                    path = f"{t.path}.spec.tolerations"
                    raise ManifestError(path, raw, "expected a list, got")
                out[t.name] = None if raw is None else copy.deepcopy(raw)
            return out
        path, raw = _recorded(ORIGINAL_TOLERATIONS_ANNOTATION, recorded)
        if not isinstance(raw, dict) or not all(
            v is None or (isinstance(v, list) and all(isinstance(x, dict) for x in v))
            for v in raw.values()
        ):
            raise ManifestError(path, recorded, "expected {pod set: [toleration] or null}, got")
        return {str(k): v for k, v in raw.items()}

    def _set_tolerations(
        self, t: Template, original: list[Any] | None, added: list[dict[str, str]]
    ) -> Patch:
        """The template's tolerations: the user's, then each of ``added`` not among them."""
        tokens = (*t.tokens, "spec", "tolerations")
        if original is None and not added:
            return remove_value(self.obj, tokens)
        wanted = list(original or [])
        for toleration in added:
            if not any(_same_toleration(toleration, have) for have in wanted):
                wanted.append(toleration)
        return set_value(self.obj, tokens, wanted)

    def _restore_tolerations(self) -> Patch:
        """Each pinned template's tolerations back to the recorded ones, exactly, and the
        record dropped; nothing when ``run_with`` recorded none."""
        if ORIGINAL_TOLERATIONS_ANNOTATION not in m.annotation_map(self.obj):
            return Patch()
        patch = Patch()
        originals = self._original_tolerations()
        for t in self._pinned():
            if t.name in originals:
                patch += self._set_tolerations(t, originals[t.name], [])
        tokens = ("metadata", "annotations", ORIGINAL_TOLERATIONS_ANNOTATION)
        return patch + remove_value(self.obj, tokens)


def _same_toleration(ours: Mapping[str, str], theirs: object) -> bool:
    """Whether a template's toleration says what ``ours`` (as ``toleration_json`` writes
    it) says: the operator defaults to Equal, empty fields are absent; one with
    ``tolerationSeconds`` is another toleration."""
    if not isinstance(theirs, Mapping):
        return False
    spelled = {k: v for k, v in theirs.items() if v not in ("", None)}
    spelled.setdefault("operator", "Equal")
    return spelled == ours


def _recorded(annotation: str, text: str) -> tuple[str, Any]:
    """The JSON path of one of our annotations, and its value parsed."""
    path = f"metadata.annotations[{annotation}]"
    try:
        return path, json.loads(text)
    except ValueError:
        raise ManifestError(path, text, "bad JSON") from None


def _put(obj: Any, tokens: Sequence[Token], value: int | None) -> None:
    """Set (or, for None, drop) the member at ``tokens`` of a plain JSON copy."""
    for token in tokens[:-1]:
        obj = obj[token] if isinstance(token, int) else obj.setdefault(token, {})
    if value is None:
        obj.pop(tokens[-1], None)
    else:
        obj[tokens[-1]] = value


def set_annotations(obj: Mapping[str, Any], updates: Mapping[str, str]) -> Patch:
    """Set these annotations, keeping the others (one add per key, or the whole map)."""
    meta = m.mapping(obj, "metadata", "")
    if meta.get("annotations") is None:
        return set_value(obj, ("metadata", "annotations"), dict(sorted(updates.items())))
    patch = Patch()
    for key, value in sorted(updates.items()):
        patch += set_value(obj, ("metadata", "annotations", key), value)
    return patch
