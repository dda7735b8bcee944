"""Shared helpers for the Kubernetes adapter's unit tests: manifests and a JSON Patch applier."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import yaml

MANIFESTS = Path(__file__).parent / "manifests"


def manifest(name: str) -> dict[str, Any]:
    """A sample manifest from ``manifests/`` (a fresh copy each time)."""
    loaded = yaml.safe_load((MANIFESTS / f"{name}.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _tokens(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> Any:
    for t in tokens[:-1]:
        doc = doc[int(t)] if isinstance(doc, list) else doc[t]
    return doc


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/remove/replace/test, strict: a missing parent is an error, as on the server."""
    out = copy.deepcopy(doc)
    for op in ops:
        tokens = _tokens(op["path"])
        parent = _parent(out, tokens)
        key: Any = int(tokens[-1]) if isinstance(parent, list) else tokens[-1]
        if op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(key, copy.deepcopy(op["value"]))
            else:
                parent[key] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            assert key in parent if isinstance(parent, dict) else key < len(parent)
            parent[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del parent[key]
        elif op["op"] == "test":
            if parent[key] != op["value"]:
                raise AssertionError(f"test failed at {op['path']}")
        else:
            raise AssertionError(f"unknown op {op['op']}")
    return out


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch of an AdmissionReview response."""
    inner = response["response"]
    assert inner["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(inner["patch"]))
    assert isinstance(patch, list)
    return patch
