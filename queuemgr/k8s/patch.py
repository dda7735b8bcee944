"""JSON Patch (RFC 6902) operations built against the object they will be applied to.

Why it exists: suspending a job, running it on an admission and the mutating
webhook's answer are all JSON Patches. The same patch serves the typed client
(a list body is sent as ``application/json-patch+json``), the dynamic client
for custom resources, and AdmissionReview (``patchType: JSONPatch``). A JSON
Merge Patch could not do it: it replaces lists whole, and a JobSet's
``replicatedJobs`` is a list.

What must stay true: ``add`` needs the parent to exist, so :func:`set_value`
looks at the current object and adds the nested value at the first missing
(or null) level; path tokens are escaped (``/`` -> ``~1``, ``~`` -> ``~0``),
so label keys such as ``queuemgr.io/queue-name`` address one member; values
are deep copies, never shared with the object they were read from.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Token = str | int


def pointer(tokens: Sequence[Token]) -> str:
    """The JSON Pointer (RFC 6901) for ``tokens``: ``("metadata", "a/b")`` -> ``/metadata/a~1b``."""
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


@dataclass(frozen=True, kw_only=True, slots=True)
class Operation:
    op: str  # "add", "remove", "replace" or "test"
    path: str
    value: Any = None

    def as_json(self) -> dict[str, Any]:
        if self.op == "remove":
            return {"op": "remove", "path": self.path}
        return {"op": self.op, "path": self.path, "value": copy.deepcopy(self.value)}


@dataclass(frozen=True, kw_only=True, slots=True)
class Patch:
    """An ordered JSON Patch; empty when there is nothing to change."""

    operations: tuple[Operation, ...] = field(default=())

    def __bool__(self) -> bool:
        return bool(self.operations)

    def __add__(self, other: Patch) -> Patch:
        return Patch(operations=self.operations + other.operations)

    def as_json(self) -> list[dict[str, Any]]:
        """The body for ``application/json-patch+json`` (and AdmissionReview's ``patch``)."""
        return [o.as_json() for o in self.operations]


def _get(obj: Any, token: Token) -> tuple[bool, Any]:
    if isinstance(token, int):
        if isinstance(obj, list) and 0 <= token < len(obj):
            return True, obj[token]
        return False, None
    if isinstance(obj, Mapping) and token in obj:
        return True, obj[token]
    return False, None


def _nest(tokens: Sequence[Token], value: Any) -> Any:
    for token in reversed(tokens):
        if isinstance(token, int):
            raise ValueError(f"cannot create list element {token} under a missing parent")
        value = {token: value}
    return value


def set_value(obj: Mapping[str, Any], tokens: Sequence[Token], value: Any) -> Patch:
    """Set ``obj`` at ``tokens`` to ``value``, creating missing parent objects."""
    if not tokens:
        raise ValueError("set_value needs a path")
    current: Any = obj
    for depth, token in enumerate(tokens[:-1]):
        found, nxt = _get(current, token)
        if not found or nxt is None:
            here = tokens[: depth + 1]
            nested = _nest(tokens[depth + 1 :], copy.deepcopy(value))
            return Patch(operations=(Operation(op="add", path=pointer(here), value=nested),))
        current = nxt
    found, old = _get(current, tokens[-1])
    if found and old == value:
        return Patch()
    return Patch(
        operations=(Operation(op="add", path=pointer(tokens), value=copy.deepcopy(value)),)
    )


def remove_value(obj: Mapping[str, Any], tokens: Sequence[Token]) -> Patch:
    """Remove ``obj`` at ``tokens`` if it is there; nothing otherwise."""
    current: Any = obj
    for token in tokens:
        found, current = _get(current, token)
        if not found:
            return Patch()
    return Patch(operations=(Operation(op="remove", path=pointer(tokens)),))


def guard(tokens: Sequence[Token], value: Any) -> Patch:
    """Make the whole patch fail unless ``tokens`` still holds ``value`` (a guard)."""
    return Patch(operations=(Operation(op="test", path=pointer(tokens), value=value),))
