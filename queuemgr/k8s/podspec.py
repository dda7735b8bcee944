"""A pod template as a core :class:`~queuemgr.core.model.PodSet`: exact requests per pod.

Why it exists: quota is charged per pod, so the request of one pod must be the
number Kubernetes' scheduler uses: the *effective* request, not the sum of
whatever the containers list.

What must stay true (Kubernetes' rules, for every resource):

- a container's request is its ``requests`` entry, or its ``limits`` entry when
  the request is absent (the API server defaults it so);
- init containers run one at a time before the app containers, so they count
  by their maximum, not their sum; sidecars (init containers with
  ``restartPolicy: Always``) keep running, so each adds to everything started
  after it: ``pod = max(sum(containers) + sum(sidecars), max_i(init_i +
  sidecars started before i)) + overhead``;
- amounts are exact integers in the core's canonical units (millicores,
  bytes, counts), zero amounts are left out, and a bad quantity or name is a
  :class:`~queuemgr.k8s.manifest.ManifestError` naming its JSON path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queuemgr.core.model import PodSet, TaintEffect, Toleration
from queuemgr.core.resources import (
    QuantityError,
    ResourceName,
    add,
    parse_quantity,
    parse_resource_name,
)
from queuemgr.k8s import manifest as m
from queuemgr.k8s.manifest import ManifestError

# Annotations on a pod template asking for topology-aware placement (docs/scheduling.md):
# all pods of the pod set on nodes sharing one value of the named node label.
REQUIRED_TOPOLOGY = "queuemgr.io/podset-required-topology"
PREFERRED_TOPOLOGY = "queuemgr.io/podset-preferred-topology"


def _quantity_error(error: QuantityError) -> ManifestError:
    why = str(error).removeprefix(f"{error.field}: ").removesuffix(f" {error.value!r}")
    return ManifestError(error.field, error.value, why)


def _vector(raw: Mapping[str, Any], path: str) -> dict[ResourceName, int]:
    out: dict[ResourceName, int] = {}
    try:
        for key, value in raw.items():
            field = m.child(path, str(key))
            name = parse_resource_name(key, field=field)
            out[name] = parse_quantity(value, resource=name, field=field)
    except QuantityError as error:
        raise _quantity_error(error) from None
    return out


def container_requests(container: Mapping[str, Any], path: str) -> dict[ResourceName, int]:
    """One container's requests, each defaulted from its limit when absent."""
    resources = m.mapping(container, "resources", path)
    rpath = m.child(path, "resources")
    requests = _vector(m.mapping(resources, "requests", rpath), m.child(rpath, "requests"))
    limits = _vector(m.mapping(resources, "limits", rpath), m.child(rpath, "limits"))
    out = dict(limits)
    out.update(requests)
    return out


def _max(a: Mapping[ResourceName, int], b: Mapping[ResourceName, int]) -> dict[ResourceName, int]:
    out = dict(a)
    for r, v in b.items():
        out[r] = max(out.get(r, 0), v)
    return out


def effective_requests(pod_spec: Mapping[str, Any], path: str) -> dict[ResourceName, int]:
    """What one pod of ``pod_spec`` requests, by Kubernetes' effective-request rule."""
    app: dict[ResourceName, int] = {}
    for i, container in enumerate(m.sequence(pod_spec, "containers", path)):
        cpath = m.child(m.child(path, "containers"), i)
        if not isinstance(container, Mapping):
            raise ManifestError(cpath, container, "expected an object, got")
        app = add(app, container_requests(container, cpath))
    sidecars: dict[ResourceName, int] = {}
    init_peak: dict[ResourceName, int] = {}
    for i, container in enumerate(m.sequence(pod_spec, "initContainers", path)):
        cpath = m.child(m.child(path, "initContainers"), i)
        if not isinstance(container, Mapping):
            raise ManifestError(cpath, container, "expected an object, got")
        request = container_requests(container, cpath)
        if m.string(container, "restartPolicy", cpath) == "Always":
            sidecars = add(sidecars, request)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, add(sidecars, request))
    pod = _max(add(app, sidecars), init_peak)
    overhead = _vector(m.mapping(pod_spec, "overhead", path), m.child(path, "overhead"))
    return {r: v for r, v in add(pod, overhead).items() if v}


def tolerations(pod_spec: Mapping[str, Any], path: str) -> tuple[Toleration, ...]:
    out: list[Toleration] = []
    for i, raw in enumerate(m.sequence(pod_spec, "tolerations", path)):
        tpath = m.child(m.child(path, "tolerations"), i)
        if not isinstance(raw, Mapping):
            raise ManifestError(tpath, raw, "expected an object, got")
        operator = m.string(raw, "operator", tpath, "Equal")
        if operator not in ("Equal", "Exists"):
            raise ManifestError(
                m.child(tpath, "operator"), operator, "expected Equal or Exists, got"
            )
        effect_text = m.string(raw, "effect", tpath)
        try:
            effect = TaintEffect(effect_text) if effect_text else None
        except ValueError:
            raise ManifestError(m.child(tpath, "effect"), effect_text, "unknown effect") from None
        out.append(
            Toleration(
                key=m.string(raw, "key", tpath),
                operator=operator,
                value=m.string(raw, "value", tpath),
                effect=effect,
            )
        )
    return tuple(out)


def pod_set(
    name: str,
    count: int,
    template: Mapping[str, Any],
    path: str,
    *,
    min_count: int | None = None,
    devices: Mapping[ResourceName, int] | None = None,
    quota_only: frozenset[ResourceName] = frozenset(),
) -> PodSet:
    """The pod set of ``count`` pods made from ``template`` (a PodTemplateSpec at ``path``);
    ``devices`` are per-pod DRA charges added to its requests (``quota_only`` of them
    placed on no node)."""
    spec_path = m.child(path, "spec")
    spec = m.required_mapping(template, "spec", path)
    notes = m.string_map(m.mapping(template, "metadata", path), "annotations", f"{path}.metadata")
    required = notes.get(REQUIRED_TOPOLOGY) or None
    preferred = notes.get(PREFERRED_TOPOLOGY) or None
    if required and preferred:
        raise ManifestError(
            f"{path}.metadata.annotations",
            notes,
            "set a required or a preferred topology, not both:",
        )
    return PodSet(
        name=name,
        count=count,
        requests=add(effective_requests(spec, spec_path), devices or {}),
        quota_only=quota_only,
        node_selector=m.string_map(spec, "nodeSelector", spec_path),
        tolerations=tolerations(spec, spec_path),
        topology_required=required,
        topology_preferred=preferred,
        min_count=min_count,
    )
