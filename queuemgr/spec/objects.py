"""Readers for the nested objects of a scenario: taints, pod sets, quotas, policies.

Why it exists: taints, tolerations, resource vectors and pod sets appear in
flavors, nodes and workloads alike; reading them in one place keeps their
validation (and its error paths) identical wherever they occur. Flavor quotas,
preemption policies and resource weights live here too, to keep ``scenario``
about the top-level sections and their cross-references (``cq create/edit``
read a ``--resource-weight`` with the same rules).

What must stay true: each reader returns a ``queuemgr.core`` value object or
raises a :class:`ScenarioError` whose message starts with the YAML path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from queuemgr.core.model import (
    MAX_AUTOSCALE_NODES,
    FlavorAutoscale,
    FlavorName,
    FlavorQuota,
    NodeTemplate,
    PodSet,
    PreemptionPolicy,
    ReclaimWithinCohort,
    ResourceFlavor,
    Taint,
    TaintEffect,
    Toleration,
    WithinClusterQueue,
)
from queuemgr.core.names import NameRule
from queuemgr.core.resources import (
    GPU,
    QuantityError,
    ResourceName,
    parse_resource_name,
    parse_resources,
)
from queuemgr.core.values import shown
from queuemgr.core.weights import ResourceWeight, weights_problem
from queuemgr.spec import checks as y
from queuemgr.spec.checks import ScenarioError, at
from queuemgr.spec.knobs import parse_duration


def resources(raw: object, path: str) -> dict[ResourceName, int]:
    """A resource vector; the core's error already starts with ``path.resource``."""
    try:
        return parse_resources(raw, field=path)
    except QuantityError as exc:
        raise ScenarioError(str(exc)) from None


def parse_taints(raw: object, path: str) -> tuple[Taint, ...]:
    out: list[Taint] = []
    for i, item in enumerate(y.sequence(raw, path)):
        p = at(path, i)
        m = y.mapping(item, p, required=("key",), optional=("value", "effect"))
        out.append(
            Taint(
                key=y.string(m["key"], at(p, "key")),
                value=_plain(m.get("value", ""), at(p, "value")),
                effect=y.choice(TaintEffect, m.get("effect", "NoSchedule"), at(p, "effect")),
            )
        )
    return tuple(out)


def parse_tolerations(raw: object, path: str) -> tuple[Toleration, ...]:
    """A pod set's or a flavor's ``tolerations``: ``[{key, operator, value, effect}]``."""
    out: list[Toleration] = []
    for i, item in enumerate(y.sequence(raw, path)):
        p = at(path, i)
        m = y.mapping(item, p, optional=("key", "operator", "value", "effect"))
        operator = m.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            raise ScenarioError(f"{at(p, 'operator')}: expected Equal or Exists, got {operator!r}")
        key = _plain(m.get("key", ""), at(p, "key"))
        if operator == "Equal" and not key:
            raise ScenarioError(f"{at(p, 'key')}: operator Equal needs a key")
        value = _plain(m.get("value", ""), at(p, "value"))
        if operator == "Exists" and value:
            raise ScenarioError(f"{at(p, 'value')}: operator Exists takes no value")
        effect = None
        if m.get("effect") is not None:
            effect = y.choice(TaintEffect, m["effect"], at(p, "effect"))
        out.append(Toleration(key=key, operator=operator, value=value, effect=effect))
    return tuple(out)


TOLERATION_SYNTAX = "KEY=VALUE[:EFFECT], KEY[:EFFECT] or :EFFECT"


def toleration_of_text(raw: str, flag: str) -> Toleration:
    """A ``--toleration``, spelled as a ``--taint`` is: ``KEY=VALUE[:EFFECT]`` (operator
    Equal), ``KEY[:EFFECT]`` (Exists) or ``:EFFECT`` (Exists, every key); without an
    effect it tolerates every effect. Keys and values hold neither ``=`` nor ``:``."""
    where = f"{flag} {shown(raw)}"
    body, colon, effect_text = raw.partition(":")
    key, eq, value = body.partition("=")
    if eq and not key:
        raise ScenarioError(f"{where}: KEY=VALUE needs a key (:EFFECT alone tolerates any key)")
    if (colon and not effect_text) or (not key and not colon):
        raise ScenarioError(f"{where}: expected {TOLERATION_SYNTAX}")
    effect = y.choice(TaintEffect, effect_text, f"{where}: effect") if colon else None
    return Toleration(key=key, operator="Equal" if eq else "Exists", value=value, effect=effect)


def parse_autoscale(raw: object, path: str) -> FlavorAutoscale | None:
    """A flavor's ``autoscale``: ``{max_nodes: N, node: {allocatable: {...}, labels?: {...}}}``
    (null or absent: none)."""
    if raw is None:
        return None
    m = y.mapping(raw, path, required=("max_nodes", "node"))
    max_nodes = y.integer(
        m["max_nodes"], at(path, "max_nodes"), minimum=1, maximum=MAX_AUTOSCALE_NODES
    )
    node_path = at(path, "node")
    node = y.mapping(m["node"], node_path, required=("allocatable",), optional=("labels",))
    allocatable = resources(node["allocatable"], at(node_path, "allocatable"))
    if not any(v > 0 for v in allocatable.values()):
        raise ScenarioError(f"{at(node_path, 'allocatable')}: expected some capacity")
    return FlavorAutoscale(
        max_nodes=max_nodes,
        node=NodeTemplate(
            allocatable=allocatable,
            labels=y.string_map(node.get("labels", {}), at(node_path, "labels")),
        ),
    )


AUTOSCALE_SYNTAX = "MAX_NODES:RESOURCE=QTY[,RESOURCE=QTY...]"


def autoscale_of_text(raw: str, labels: Mapping[str, str], flag: str) -> FlavorAutoscale:
    """A ``--autoscale MAX_NODES:RESOURCE=QTY,...`` (the node template's allocatable),
    with the template's labels from ``--autoscale-label``."""
    where = f"{flag} {shown(raw)}"
    count, colon, vector = raw.partition(":")
    digits = count.strip()
    if (
        not colon
        or not digits.isdigit()
        or len(digits) > 6
        or not 1 <= int(digits) <= MAX_AUTOSCALE_NODES
    ):
        raise ScenarioError(
            f"{where}: expected {AUTOSCALE_SYNTAX} with MAX_NODES at least 1"
            f" and at most {MAX_AUTOSCALE_NODES}"
        )
    amounts: dict[str, str] = {}
    for part in vector.split(","):
        key, eq, value = part.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise ScenarioError(f"{where}: expected {AUTOSCALE_SYNTAX}")
        amounts[key.strip()] = value.strip()
    return FlavorAutoscale(
        max_nodes=int(digits),
        node=NodeTemplate(allocatable=resources(amounts, flag), labels=dict(labels)),
    )


def parse_pod_set(raw: object, path: str) -> PodSet:
    m = y.mapping(
        raw,
        path,
        required=("name", "count", "requests"),
        optional=("node_selector", "tolerations", "topology", "min_count"),
    )
    count = y.integer(m["count"], at(path, "count"), minimum=1)
    min_count = None
    if m.get("min_count") is not None:
        min_count = y.integer(m["min_count"], at(path, "min_count"), minimum=1)
        if min_count > count:
            raise ScenarioError(
                f"{at(path, 'min_count')}: expected at most count ({count}), got {min_count}"
            )
    required, preferred = parse_topology(m.get("topology"), at(path, "topology"))
    return PodSet(
        name=y.name(m["name"], at(path, "name")),
        count=count,
        requests=resources(m["requests"], at(path, "requests")),
        node_selector=y.string_map(m.get("node_selector", {}), at(path, "node_selector")),
        tolerations=parse_tolerations(m.get("tolerations", []), at(path, "tolerations")),
        topology_required=required,
        topology_preferred=preferred,
        min_count=min_count,
    )


def parse_topology(raw: object, path: str) -> tuple[str | None, str | None]:
    """``{required: KEY}`` or ``{preferred: KEY}`` -> (required, preferred); absent -> both None."""
    if raw is None:
        return None, None
    m = y.mapping(raw, path, optional=("required", "preferred"))
    if len(m) != 1:
        raise ScenarioError(f"{path}: expected exactly one of required, preferred (a label key)")
    ((kind, key),) = m.items()
    label = y.string(key, at(path, kind))
    return (label, None) if kind == "required" else (None, label)


def check_partial(pod_sets: tuple[PodSet, ...], path: str) -> None:
    """At most one pod set of a workload may be admitted partially (Kueue's rule)."""
    partial = [j for j, ps in enumerate(pod_sets) if ps.min_count is not None]
    if len(partial) > 1:
        first, second = partial[0], partial[1]
        raise ScenarioError(
            f"{at(at(path, second), 'min_count')}: only one pod set of a workload may set "
            f"min_count, and {at(path, first)} ({pod_sets[first].name!r}) already does"
        )


def _plain(raw: object, path: str) -> str:
    # Taint and toleration values may be empty strings, unlike names.
    if not isinstance(raw, str):
        raise ScenarioError(f"{path}: expected a string, got {raw!r}")
    return raw


def parse_preemption(raw: object, path: str) -> PreemptionPolicy:
    m = y.mapping(
        raw, path, optional=("within_cluster_queue", "reclaim_within_cohort", "min_runtime")
    )
    min_runtime = 0.0
    if m.get("min_runtime") is not None:
        min_runtime = parse_duration(m["min_runtime"], at(path, "min_runtime"), zero=True)
    return PreemptionPolicy(
        min_runtime=min_runtime,
        within_cluster_queue=y.choice(
            WithinClusterQueue,
            m.get("within_cluster_queue", "Never"),
            at(path, "within_cluster_queue"),
        ),
        reclaim_within_cohort=y.choice(
            ReclaimWithinCohort,
            m.get("reclaim_within_cohort", "Never"),
            at(path, "reclaim_within_cohort"),
        ),
    )


def parse_quotas(
    raw: object,
    path: str,
    flavors: Mapping[FlavorName, ResourceFlavor],
    cohort: str | None,
    *,
    of_cohort: bool = False,
) -> tuple[FlavorQuota, ...]:
    """A ``resources`` list: a ClusterQueue's (``cohort``: the cohort it is in), or a
    cohort's own (``of_cohort``; ``cohort``: its parent), whose limits face its parent
    and whose lending limit may exceed its own nominal: it lends its whole subtree."""
    out: list[FlavorQuota] = []
    seen: dict[str, str] = {}
    for j, item in enumerate(y.sequence(raw, path)):
        p = at(path, j)
        m = y.mapping(
            item, p, required=("flavor", "nominal"), optional=("borrowing_limit", "lending_limit")
        )
        fname = FlavorName(y.name(m["flavor"], at(p, "flavor"), NameRule.SUBDOMAIN))
        if fname not in flavors:
            raise ScenarioError(f"{at(p, 'flavor')}: unknown flavor {fname!r}")
        y.unique(seen, fname, p, "flavor quota")
        nominal = resources(m["nominal"], at(p, "nominal"))
        limits: dict[str, dict[ResourceName, int]] = {}
        for key in ("borrowing_limit", "lending_limit"):
            if key not in m:
                continue
            if cohort is None:
                owner = "a cohort with a parent" if of_cohort else "a queue in a cohort"
                raise ScenarioError(f"{at(p, key)}: only {owner} can have a {key}")
            limits[key] = resources(m[key], at(p, key))
            for r, v in limits[key].items():
                if r not in nominal:
                    raise ScenarioError(f"{at(at(p, key), r)}: {r} has no nominal quota here")
                if key == "lending_limit" and v > nominal[r] and not of_cohort:
                    raise ScenarioError(f"{at(at(p, key), r)}: lending limit exceeds nominal")
        out.append(
            FlavorQuota(
                flavor=fname,
                nominal=nominal,
                borrowing_limit=limits.get("borrowing_limit", {}),
                lending_limit=limits.get("lending_limit", {}),
            )
        )
    return tuple(out)


# The largest term of a resource weight: a MIG profile or a time-slicing factor is a
# small ratio (1/7, 1/4), and the bound keeps the fold's scale (the least common
# multiple of the denominators) small whatever a file holds.
MAX_WEIGHT_TERM = 1_000_000
_WEIGHT = re.compile(r"^\s*(\d{1,7})\s*(?:/\s*(\d{1,7})\s*)?$")
_WEIGHT_WORDS = f"expected N/D with positive integers of at most {MAX_WEIGHT_TERM} (e.g. 1/7)"


def parse_weight(raw: object, path: str) -> tuple[int, int]:
    """A resource weight's terms from ``N/D`` or ``N``, as written (never a float)."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        text = str(raw)
    elif isinstance(raw, str):
        text = raw
    else:
        raise ScenarioError(f"{path}: {_WEIGHT_WORDS}, got {shown(raw)}")
    match = _WEIGHT.match(text)
    if match is None:
        raise ScenarioError(f"{path}: {_WEIGHT_WORDS}, got {shown(raw)}")
    n, d = int(match[1]), int(match[2] or 1)
    if not (0 < n <= MAX_WEIGHT_TERM and 0 < d <= MAX_WEIGHT_TERM):
        raise ScenarioError(f"{path}: {_WEIGHT_WORDS}, got {shown(raw)}")
    return n, d


def _resource(raw: object, path: str) -> ResourceName:
    try:
        return parse_resource_name(raw, field=path)
    except QuantityError as exc:
        raise ScenarioError(str(exc)) from None


def resource_weight_of_text(raw: str, path: str) -> ResourceWeight:
    """``RES=N/D`` or ``RES=N/D:TARGET`` (a ``--resource-weight``); TARGET defaults to
    nvidia.com/gpu. Resource names hold neither ``=`` nor ``:``."""
    resource, eq, rest = raw.partition("=")
    terms, colon, target = rest.partition(":")
    if not eq or not resource or not terms or (colon and not target):
        raise ScenarioError(f"{path}: expected RES=N/D or RES=N/D:TARGET, got {shown(raw)}")
    n, d = parse_weight(terms, f"{path} {shown(raw)}")
    return ResourceWeight(
        resource=_resource(resource, path),
        numerator=n,
        denominator=d,
        counts_as=_resource(target, path) if colon else GPU,
    )


def parse_resource_weights(raw: object, path: str) -> tuple[ResourceWeight, ...]:
    """A ClusterQueue's ``resource_weights``: a list of ``{resource, weight, counts_as}``."""
    out: list[ResourceWeight] = []
    for i, item in enumerate(y.sequence(raw, path)):
        p = at(path, i)
        m = y.mapping(item, p, required=("resource", "weight"), optional=("counts_as",))
        n, d = parse_weight(m["weight"], at(p, "weight"))
        out.append(
            ResourceWeight(
                resource=_resource(m["resource"], at(p, "resource")),
                numerator=n,
                denominator=d,
                counts_as=_resource(m.get("counts_as", GPU), at(p, "counts_as")),
            )
        )
    check_resource_weights(out, [at(path, i) for i in range(len(out))])
    return tuple(out)


def check_resource_weights(weights: Sequence[ResourceWeight], paths: Sequence[str]) -> None:
    """The rules across weights (core.weights); the message starts with the offending
    one's path (``paths[i]`` names ``weights[i]``)."""
    problem = weights_problem(weights)
    if problem is not None:
        i, why = problem
        raise ScenarioError(f"{paths[i]}: {why}")


def parse_admission_checks(raw: object, path: str) -> tuple[str, ...]:
    """A ClusterQueue's ``admission_checks``: a list of check names (DNS labels), each
    once. What a name means is the controller's configuration (docs/kubernetes.md)."""
    out: list[str] = []
    for i, item in enumerate(y.sequence(raw, path)):
        name = y.name(item, at(path, i))
        if name in out:
            raise ScenarioError(f"{at(path, i)}: admission check {name!r} is listed twice")
        out.append(name)
    return tuple(out)
