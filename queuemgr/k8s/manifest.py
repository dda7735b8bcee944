"""Typed reads from Kubernetes objects held as plain dicts, with errors that name the path.

Why it exists: jobs arrive as JSON (AdmissionReview, the dynamic client), and a
user's mistake deep inside a pod template must come back as one clear line
(``spec.template.spec.containers[0].resources.requests.cpu: bad quantity
'1.2.3'``), not a ``KeyError``.

What must stay true: every reader either returns a value of the promised type
or raises :class:`ManifestError` naming the JSON path and the value; an absent
optional field is the caller's default, never an error; inputs are never
mutated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Json = dict[str, Any]


class ManifestError(ValueError):
    """A job manifest field that cannot be taken; ``path`` is its JSON path."""

    def __init__(self, path: str, value: object, why: str) -> None:
        super().__init__(f"{path}: {why} {value!r}" if why else f"{path}: {value!r}")
        self.path = path
        self.value = value
        self.why = why


def child(path: str, key: str | int) -> str:
    """The JSON path of a member: ``spec`` + ``template`` -> ``spec.template``; ``[0]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def mapping(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    """``obj[key]`` as a mapping; absent or null is an empty one."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(child(path, key), value, "expected an object, got")
    return value


def required_mapping(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        raise ManifestError(child(path, key), None, "required field missing:")
    return mapping(obj, key, path)


def sequence(obj: Mapping[str, Any], key: str, path: str) -> Sequence[Any]:
    """``obj[key]`` as a list; absent or null is an empty one."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise ManifestError(child(path, key), value, "expected a list, got")
    return value


def string(obj: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ManifestError(child(path, key), value, "expected a string, got")
    return value


def integer(obj: Mapping[str, Any], key: str, path: str, *, default: int, minimum: int) -> int:
    """``obj[key]`` as an int of at least ``minimum`` (``default`` when absent or null)."""
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(child(path, key), value, "expected an integer, got")
    if value < minimum:
        raise ManifestError(child(path, key), value, f"must be at least {minimum}, got")
    return value


def optional_integer(obj: Mapping[str, Any], key: str, path: str, *, minimum: int) -> int | None:
    if obj.get(key) is None:
        return None
    return integer(obj, key, path, default=0, minimum=minimum)


def boolean(obj: Mapping[str, Any], key: str, path: str, *, default: bool) -> bool:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ManifestError(child(path, key), value, "expected true or false, got")
    return value


def string_map(obj: Mapping[str, Any], key: str, path: str) -> dict[str, str]:
    """``obj[key]`` as a ``{str: str}`` map (labels, annotations, node selectors)."""
    raw = mapping(obj, key, path)
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not isinstance(v, str):
            raise ManifestError(child(child(path, key), str(k)), v, "expected a string, got")
        out[str(k)] = v
    return out


def label_map(obj: Mapping[str, Any]) -> dict[str, str]:
    return string_map(mapping(obj, "metadata", ""), "labels", "metadata")


def annotation_map(obj: Mapping[str, Any]) -> dict[str, str]:
    return string_map(mapping(obj, "metadata", ""), "annotations", "metadata")
