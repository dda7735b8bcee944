"""Load a scenario YAML file into core objects, rejecting anything doubtful.

Why it exists: the simulator must run exactly the cluster the user described.
Unknown fields, wrong types, dangling references, duplicate names, bad
quantities and negative numbers are errors (never defaults), and each error
names the YAML path of the offending value (see ``spec.checks``).

What must stay true: the result is built only from ``queuemgr.core`` value
objects plus each workload's simulated ``runtime``; nothing here decides
anything about scheduling. The format is documented in ``docs/simulate.md``;
change both together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from queuemgr.core.cohort_tree import tree_error
from queuemgr.core.model import (
    PRIORITY_RANGE,
    ClusterQueue,
    ClusterQueueName,
    Cohort,
    CohortName,
    FlavorName,
    LocalQueue,
    Node,
    NodeName,
    Ordering,
    QueueingStrategy,
    ResourceFlavor,
    Workload,
)
from queuemgr.core.names import NameRule
from queuemgr.core.policy import SchedulerPolicy
from queuemgr.core.snapshot import Config
from queuemgr.spec import checks as y
from queuemgr.spec.checks import ScenarioError, at
from queuemgr.spec.knobs import parse_duration, parse_policy
from queuemgr.spec.objects import (
    check_partial,
    parse_admission_checks,
    parse_autoscale,
    parse_pod_set,
    parse_preemption,
    parse_quotas,
    parse_resource_weights,
    parse_taints,
    parse_tolerations,
    resources,
)


@dataclass(frozen=True, kw_only=True)
class SimWorkload:
    """A workload plus what only a simulation knows: how long it runs once admitted."""

    workload: Workload
    runtime: float


@dataclass(frozen=True, kw_only=True)
class Scenario:
    config: Config
    workloads: tuple[SimWorkload, ...]
    # The top-level ``scheduler:`` knobs.
    policy: SchedulerPolicy = field(default_factory=SchedulerPolicy)


_TOP = ("flavors", "nodes", "cohorts", "cluster_queues", "local_queues", "workloads", "scheduler")


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario file; every problem is a :class:`ScenarioError`."""
    return parse_scenario(y.read_yaml(path, "scenario", ScenarioError))


def parse_scenario(raw: object) -> Scenario:
    top = y.mapping(raw, "", required=("flavors", "nodes", "cluster_queues"), optional=_TOP)
    flavors = _flavors(top["flavors"])
    nodes = _nodes(top["nodes"], flavors)
    cohorts = _cohorts(top.get("cohorts", []), flavors)
    cqs = _cluster_queues(top["cluster_queues"], flavors, cohorts)
    lqs = _local_queues(top.get("local_queues", []), cqs)
    workloads = _workloads(top.get("workloads", []), lqs)
    policy = parse_policy(top.get("scheduler") or {}, "scheduler")
    config = Config.of(
        flavors=flavors.values(),
        cohorts=cohorts,
        cluster_queues=cqs.values(),
        local_queues=lqs.values(),
        nodes=nodes,
    )
    return Scenario(config=config, workloads=tuple(workloads), policy=policy)


def _flavors(raw: object) -> dict[FlavorName, ResourceFlavor]:
    out: dict[FlavorName, ResourceFlavor] = {}
    seen: dict[str, str] = {}
    for i, item in enumerate(y.sequence(raw, "flavors")):
        p = at("flavors", i)
        m = y.mapping(
            item,
            p,
            required=("name",),
            optional=("node_labels", "taints", "tolerations", "autoscale"),
        )
        fname = FlavorName(y.name(m["name"], at(p, "name"), NameRule.SUBDOMAIN))
        y.unique(seen, fname, p, "flavor")
        out[fname] = ResourceFlavor(
            name=fname,
            node_labels=y.string_map(m.get("node_labels", {}), at(p, "node_labels")),
            taints=parse_taints(m.get("taints", []), at(p, "taints")),
            tolerations=parse_tolerations(m.get("tolerations", []), at(p, "tolerations")),
            autoscale=parse_autoscale(m.get("autoscale"), at(p, "autoscale")),
        )
    return out


def _nodes(raw: object, flavors: Mapping[FlavorName, ResourceFlavor]) -> list[Node]:
    out: list[Node] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(y.sequence(raw, "nodes")):
        p = at("nodes", i)
        m = y.mapping(
            item,
            p,
            required=("name", "allocatable"),
            optional=("count", "flavor", "labels", "taints", "schedulable"),
        )
        base = y.name(m["name"], at(p, "name"), NameRule.SUBDOMAIN)
        count = y.integer(m.get("count", 1), at(p, "count"), minimum=1)
        labels = y.string_map(m.get("labels", {}), at(p, "labels"))
        if "flavor" in m:
            fname = y.name(m["flavor"], at(p, "flavor"), NameRule.SUBDOMAIN)
            flavor = flavors.get(FlavorName(fname))
            if flavor is None:
                raise ScenarioError(f"{at(p, 'flavor')}: unknown flavor {fname!r}")
            for k, v in flavor.node_labels.items():
                if labels.get(k, v) != v:
                    raise ScenarioError(
                        f"{at(at(p, 'labels'), k)}: {labels[k]!r} conflicts with flavor "
                        f"{fname!r}'s node_labels ({k}: {v!r})"
                    )
            labels = {**labels, **flavor.node_labels}
            _check_selected_by(flavors, fname, labels, p)
        allocatable = resources(m["allocatable"], at(p, "allocatable"))
        taints = parse_taints(m.get("taints", []), at(p, "taints"))
        schedulable = y.boolean(m.get("schedulable", True), at(p, "schedulable"))
        names = [base] if count == 1 else [f"{base}-{k}" for k in range(count)]
        for node_name in names:
            y.unique(seen, node_name, p, "node")
            out.append(
                Node(
                    name=NodeName(node_name),
                    labels=labels,
                    allocatable=allocatable,
                    taints=taints,
                    schedulable=schedulable,
                )
            )
    return out


def _check_selected_by(
    flavors: Mapping[FlavorName, ResourceFlavor], declared: str, labels: dict[str, str], p: str
) -> None:
    # The scheduler files a node under the first flavor (by name) whose labels it
    # carries; if that is not the declared one, the node would silently change flavor.
    first = next((f for f in sorted(flavors) if flavors[f].selects(labels)), None)
    if first != declared:
        raise ScenarioError(
            f"{at(p, 'flavor')}: the node's labels also select flavor {first!r}, which the "
            f"scheduler takes first; give the flavors distinguishing node_labels"
        )


def _cohorts(raw: object, flavors: Mapping[FlavorName, ResourceFlavor]) -> list[Cohort]:
    out: list[Cohort] = []
    seen: dict[str, str] = {}
    optional = ("fair_sharing", "ordering", "parent", "weight", "resources")
    for i, item in enumerate(y.sequence(raw, "cohorts")):
        p = at("cohorts", i)
        m = y.mapping(item, p, required=("name",), optional=optional)
        cname = y.name(m["name"], at(p, "name"))
        y.unique(seen, cname, p, "cohort")
        fair = m.get("fair_sharing", False)
        if not isinstance(fair, bool):
            raise ScenarioError(f"{at(p, 'fair_sharing')}: expected true or false, got {fair!r}")
        parent = None
        if m.get("parent") is not None:
            parent = CohortName(y.name(m["parent"], at(p, "parent")))
        out.append(
            Cohort(
                name=CohortName(cname),
                fair_sharing=fair,
                ordering=_ordering(m.get("ordering"), at(p, "ordering")),
                parent=parent,
                flavors=parse_quotas(
                    m.get("resources", []), at(p, "resources"), flavors, parent, of_cohort=True
                ),
                weight=y.fraction(m.get("weight", 1), at(p, "weight")),
            )
        )
    problem = tree_error({c.name: c.parent for c in out})
    if problem is not None:
        raise ScenarioError(f"cohorts: {problem}")
    return out


def _ordering(raw: object, path: str) -> Ordering | None:
    """A ClusterQueue's or cohort's ``ordering``; absent or null: the scheduler's."""
    return None if raw is None else y.choice(Ordering, raw, path)


def _cluster_queues(
    raw: object, flavors: Mapping[FlavorName, ResourceFlavor], cohorts: list[Cohort]
) -> dict[ClusterQueueName, ClusterQueue]:
    out: dict[ClusterQueueName, ClusterQueue] = {}
    seen: dict[str, str] = {}
    cohort_names = {c.name for c in cohorts}
    optional = (
        "cohort",
        "weight",
        "queueing_strategy",
        "namespaces",
        "preemption",
        "ordering",
        "borrowing_max_runtime",
        "resource_weights",
        "admission_checks",
    )
    for i, item in enumerate(y.sequence(raw, "cluster_queues")):
        p = at("cluster_queues", i)
        m = y.mapping(item, p, required=("name", "resources"), optional=optional)
        qname = ClusterQueueName(y.name(m["name"], at(p, "name")))
        y.unique(seen, qname, p, "cluster queue")
        cohort: CohortName | None = None
        if m.get("cohort") is not None:
            cohort = CohortName(y.name(m["cohort"], at(p, "cohort")))
            if cohort not in cohort_names:
                raise ScenarioError(f"{at(p, 'cohort')}: cohort {cohort!r} is not declared")
        namespaces: frozenset[str] | None = None
        if m.get("namespaces") is not None:
            ns_path = at(p, "namespaces")
            items = y.sequence(m["namespaces"], ns_path)
            namespaces = frozenset(y.name(v, at(ns_path, j)) for j, v in enumerate(items))
        out[qname] = ClusterQueue(
            name=qname,
            flavors=parse_quotas(m["resources"], at(p, "resources"), flavors, cohort),
            cohort=cohort,
            weight=y.fraction(m.get("weight", 1), at(p, "weight")),
            queueing_strategy=y.choice(
                QueueingStrategy,
                m.get("queueing_strategy", "BestEffortFIFO"),
                at(p, "queueing_strategy"),
            ),
            namespaces=namespaces,
            preemption=parse_preemption(m.get("preemption", {}), at(p, "preemption")),
            ordering=_ordering(m.get("ordering"), at(p, "ordering")),
            borrowing_max_runtime=(
                None
                if m.get("borrowing_max_runtime") is None
                else parse_duration(m["borrowing_max_runtime"], at(p, "borrowing_max_runtime"))
            ),
            resource_weights=parse_resource_weights(
                m.get("resource_weights", []), at(p, "resource_weights")
            ),
            admission_checks=parse_admission_checks(
                m.get("admission_checks", []), at(p, "admission_checks")
            ),
        )
    return out


def _local_queues(
    raw: object, cqs: Mapping[ClusterQueueName, ClusterQueue]
) -> dict[tuple[str, str], LocalQueue]:
    out: dict[tuple[str, str], LocalQueue] = {}
    seen: dict[str, str] = {}
    for i, item in enumerate(y.sequence(raw, "local_queues")):
        p = at("local_queues", i)
        m = y.mapping(item, p, required=("namespace", "name", "cluster_queue"))
        ns = y.name(m["namespace"], at(p, "namespace"))
        lname = y.name(m["name"], at(p, "name"))
        y.unique(seen, f"{ns}/{lname}", p, "local queue")
        cq = ClusterQueueName(y.name(m["cluster_queue"], at(p, "cluster_queue")))
        if cq not in cqs:
            raise ScenarioError(f"{at(p, 'cluster_queue')}: unknown cluster queue {cq!r}")
        out[(ns, lname)] = LocalQueue(namespace=ns, name=lname, cluster_queue=cq)
    return out


def _workloads(raw: object, lqs: Mapping[tuple[str, str], LocalQueue]) -> list[SimWorkload]:
    out: list[SimWorkload] = []
    seen: dict[str, str] = {}
    optional = ("submit_at", "max_runtime", "priority", "count", "submit_every")
    for i, item in enumerate(y.sequence(raw, "workloads")):
        p = at("workloads", i)
        m = y.mapping(
            item,
            p,
            required=("name", "namespace", "queue", "runtime", "pod_sets"),
            optional=optional,
        )
        ns = y.name(m["namespace"], at(p, "namespace"))
        wname = y.name(m["name"], at(p, "name"), NameRule.SUBDOMAIN)
        # count > 1 stands for NAME-0 .. NAME-(count-1), submitted submit_every apart.
        count = y.integer(m.get("count", 1), at(p, "count"), minimum=1)
        every = y.number(m.get("submit_every", 0), at(p, "submit_every"))
        wnames = [wname] if count == 1 else [f"{wname}-{k}" for k in range(count)]
        for one in wnames:
            y.unique(seen, f"{ns}/{one}", p, "workload")
        queue = y.name(m["queue"], at(p, "queue"))
        if (ns, queue) not in lqs:
            raise ScenarioError(f"{at(p, 'queue')}: no local queue {queue!r} in namespace {ns!r}")
        ps_path = at(p, "pod_sets")
        items = y.sequence(m["pod_sets"], ps_path)
        if not items:
            raise ScenarioError(f"{ps_path}: a workload needs at least one pod set")
        pod_sets = tuple(parse_pod_set(v, at(ps_path, j)) for j, v in enumerate(items))
        names: dict[str, str] = {}
        for j, ps in enumerate(pod_sets):
            y.unique(names, ps.name, at(ps_path, j), "pod set")
        check_partial(pod_sets, ps_path)
        max_runtime = None
        if m.get("max_runtime") is not None:
            max_runtime = y.number(m["max_runtime"], at(p, "max_runtime"), positive=True)
        priority = y.integer(
            m.get("priority", 0),
            at(p, "priority"),
            minimum=PRIORITY_RANGE[0],
            maximum=PRIORITY_RANGE[1],
        )
        submit_at = y.number(m.get("submit_at", 0), at(p, "submit_at"))
        runtime = y.number(m["runtime"], at(p, "runtime"))
        for k, one in enumerate(wnames):
            workload = Workload(
                namespace=ns,
                name=one,
                queue=queue,
                pod_sets=pod_sets,
                priority=priority,
                created_at=submit_at + k * every,
                max_runtime=max_runtime,
            )
            out.append(SimWorkload(workload=workload, runtime=runtime))
    return out
