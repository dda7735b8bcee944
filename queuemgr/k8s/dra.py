"""Dynamic Resource Allocation (``resource.k8s.io/v1``) devices charged against quota.

Why it exists: a pod that asks for GPUs through ``spec.resourceClaims`` names
no extended resource, so its container requests say nothing of its devices.
An admin maps each DeviceClass to a quota resource name (as Kueue's
``deviceClassMappings`` does); then every pod of a pod set is charged, per
claim made from a ResourceClaimTemplate, ``count`` units of that resource for
each device request of the template. Node fit counts the devices the
drivers' ResourceSlices publish per node; a class whose driver publishes
none is charged to quota only (``PodSet.quota_only``).

What must stay true:

- a claim is charged only through a ResourceClaimTemplate (one claim per
  pod); a shared ``resourceClaimName``, an ``allocationMode: All`` request, a
  ``firstAvailable`` list, an unmapped class and a missing template are each
  refused with a :class:`~queuemgr.k8s.manifest.ManifestError` naming the
  JSON path and the value, never charged as zero;
- with no mapping configured, DRA is off: claims are not read at all;
- only the newest generation of a ResourceSlice pool counts, and only slices
  bound to one node (``spec.nodeName``); amounts are exact integers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queuemgr.core.resources import ResourceName, add
from queuemgr.k8s import manifest as m
from queuemgr.k8s.manifest import ManifestError

GROUP, VERSION = "resource.k8s.io", "v1"
CLAIM_TEMPLATES, RESOURCE_SLICES = "resourceclaimtemplates", "resourceslices"
MAX_DEVICES = 1024  # per device request: the bound ``count`` keeps charges sane

Obj = dict[str, Any]
# (namespace, name) -> the ResourceClaimTemplate, or None when there is none
TemplateLookup = Callable[[str, str], Mapping[str, Any] | None]


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceClassMapping:
    """One DeviceClass charged as ``resource``; ``driver`` names whose ResourceSlices
    give each node's count of it (None: quota only)."""

    device_class: str
    resource: ResourceName
    driver: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Charge:
    """What one pod's claims add: per-pod amounts, and which of them no node reports."""

    requests: Mapping[ResourceName, int]
    quota_only: frozenset[ResourceName]


NO_CHARGE = Charge(requests={}, quota_only=frozenset())


class DeviceCharger:
    """Turns a pod spec's claims into quota requests by the configured mappings."""

    def __init__(
        self,
        mappings: Sequence[DeviceClassMapping],
        templates: TemplateLookup,
        published: Callable[[str], bool] = lambda driver: False,
    ) -> None:
        self._by_class = {mp.device_class: mp for mp in mappings}
        self._templates = templates
        self._published = published

    def charge(self, pod_spec: Mapping[str, Any], path: str, namespace: str) -> Charge:
        """The devices one pod of ``pod_spec`` (at JSON ``path``) claims."""
        claims = m.sequence(pod_spec, "resourceClaims", path)
        if not self._by_class or not claims:
            return NO_CHARGE
        total: dict[ResourceName, int] = {}
        quota_only: set[ResourceName] = set()
        for i, claim in enumerate(claims):
            cpath = m.child(m.child(path, "resourceClaims"), i)
            if not isinstance(claim, Mapping):
                raise ManifestError(cpath, claim, "expected an object, got")
            shared = m.string(claim, "resourceClaimName", cpath)
            if shared:
                raise ManifestError(
                    m.child(cpath, "resourceClaimName"),
                    shared,
                    "a shared ResourceClaim cannot be charged to one job's quota;"
                    " use resourceClaimTemplateName, got",
                )
            name = m.string(claim, "resourceClaimTemplateName", cpath)
            tpath = m.child(cpath, "resourceClaimTemplateName")
            if not name:
                raise ManifestError(cpath, dict(claim), "names no ResourceClaimTemplate:")
            template = self._templates(namespace, name)
            if template is None:
                raise ManifestError(
                    tpath, name, f"no ResourceClaimTemplate in namespace {namespace!r} is named"
                )
            for mapping, count in self._requests(template, f"ResourceClaimTemplate {name}"):
                total = add(total, {mapping.resource: count})
                if mapping.driver is None or not self._published(mapping.driver):
                    quota_only.add(mapping.resource)
        return Charge(requests=total, quota_only=frozenset(quota_only))

    def _requests(
        self, template: Mapping[str, Any], where: str
    ) -> Iterable[tuple[DeviceClassMapping, int]]:
        spec = m.mapping(m.mapping(template, "spec", where), "spec", f"{where}: spec")
        rpath = f"{where}: spec.spec.devices"
        for j, request in enumerate(
            m.sequence(m.mapping(spec, "devices", rpath), "requests", rpath)
        ):
            qpath = f"{rpath}.requests[{j}]"
            if not isinstance(request, Mapping):
                raise ManifestError(qpath, request, "expected an object, got")
            if request.get("firstAvailable"):
                raise ManifestError(
                    f"{qpath}.firstAvailable",
                    m.string(request, "name", qpath),
                    "a request with alternatives cannot be charged to one quota resource:",
                )
            exactly = m.mapping(request, "exactly", qpath)
            epath = f"{qpath}.exactly"
            device_class = m.string(exactly, "deviceClassName", epath)
            mapping = self._by_class.get(device_class)
            if mapping is None:
                raise ManifestError(
                    f"{epath}.deviceClassName",
                    device_class,
                    "DeviceClass is not mapped to a quota resource (kubernetes.device_classes):",
                )
            mode = m.string(exactly, "allocationMode", epath, "ExactCount")
            if mode != "ExactCount":
                raise ManifestError(
                    f"{epath}.allocationMode",
                    mode,
                    "only ExactCount can be charged (All takes every matching device), got",
                )
            count = exactly.get("count", 1)
            if (
                not isinstance(count, int)
                or isinstance(count, bool)
                or not 1 <= count <= MAX_DEVICES
            ):
                raise ManifestError(
                    f"{epath}.count", count, f"expected an integer in [1, {MAX_DEVICES}], got"
                )
            yield mapping, count


def slice_devices(
    slices: Iterable[Mapping[str, Any]], drivers: Mapping[str, ResourceName]
) -> dict[str, dict[ResourceName, int]]:
    """Per node, the devices the ResourceSlices of each mapped driver publish, as the
    driver's quota resource. A pool counts at its newest generation only."""
    newest: dict[tuple[str, str], int] = {}
    kept: list[tuple[tuple[str, str], int, str, ResourceName, int]] = []
    for s in slices:
        spec = s.get("spec") or {}
        driver, node = spec.get("driver"), spec.get("nodeName")
        if driver not in drivers or not isinstance(node, str) or not node:
            continue
        pool = spec.get("pool") or {}
        key = (str(driver), str(pool.get("name") or node))
        raw = pool.get("generation")
        generation = raw if isinstance(raw, int) else 0
        newest[key] = max(newest.get(key, generation), generation)
        devices = spec.get("devices") or ()
        kept.append((key, generation, node, drivers[str(driver)], len(devices)))
    out: dict[str, dict[ResourceName, int]] = {}
    for key, generation, node, resource, count in kept:
        if generation == newest[key] and count:
            per = out.setdefault(node, {})
            per[resource] = per.get(resource, 0) + count
    return out


def published_drivers(slices: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The drivers that publish at least one device on some node."""
    return frozenset(
        str((s.get("spec") or {}).get("driver"))
        for s in slices
        if (s.get("spec") or {}).get("devices") and (s.get("spec") or {}).get("nodeName")
    )


class StaticClaimTemplates:
    """An in-memory lookup of ResourceClaimTemplates (for tests and the simulator's peers)."""

    def __init__(self, templates: Iterable[Mapping[str, Any]] = ()) -> None:
        self._by_key: dict[tuple[str, str], Mapping[str, Any]] = {}
        for t in templates:
            meta = t.get("metadata") or {}
            self._by_key[(str(meta.get("namespace")), str(meta.get("name")))] = t

    def __call__(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._by_key.get((namespace, name))
