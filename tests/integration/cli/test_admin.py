"""Admin commands: quota set (validation, lowering below usage), cq/lq/flavor/cohort, audit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine

from queuemgr.core.model import (
    Admission,
    AdmittedWorkload,
    ClusterQueueName,
    FlavorName,
    NodeName,
    PodSetPlacement,
)
from queuemgr.core.reasons import Decisions, PendingStatuses
from queuemgr.store.decisions import persist_decisions
from queuemgr.store.handle import Database
from queuemgr.store.repository import load_state
from tests.integration.cli.conftest import Invoke, no_traceback

pytestmark = pytest.mark.integration


def _admit_all(engine: Engine) -> None:
    """Admit every pending workload on h100 node h100-<i>, as the service would have."""
    state = load_state(Database(engine))
    admitted = tuple(
        AdmittedWorkload(
            workload=w,
            admission=Admission(
                workload=w.id,
                cluster_queue=ClusterQueueName("team-a"),
                flavor=FlavorName("h100"),
                placements=(PodSetPlacement(pod_set="main", node=NodeName(f"h100-{i}"), count=1),),
            ),
            admitted_at=time.time() + i,
        )
        for i, w in enumerate(sorted(state.pending, key=lambda w: w.name))
    )
    empty = PendingStatuses(
        queues={},
        unroutable=(),
        verdicts={},
        shape_verdicts={},
        blocked={},
        admitted=frozenset(),
    )
    with engine.begin() as conn:
        persist_decisions(conn, Decisions(admitted=admitted, pending=empty), now=time.time())


def test_quota_set_validates_before_writing(cli: Invoke, applied: Path) -> None:
    bad = cli("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=lots")
    assert bad.exit_code == 2 and "RES=QTY nvidia.com/gpu" in bad.output
    no_traceback(bad)
    unknown = cli("quota", "set", "tema-a", "--flavor", "h100", "nvidia.com/gpu=8")
    assert unknown.exit_code == 1 and "did you mean 'team-a'" in unknown.output
    flavor = cli("quota", "set", "team-a", "--flavor", "h10", "nvidia.com/gpu=8")
    assert flavor.exit_code == 1 and "'h100'" in flavor.output
    lend = cli("quota", "set", "team-a", "--flavor", "h100", "--lending-limit", "nvidia.com/gpu=99")
    assert lend.exit_code == 2 and "--lending-limit nvidia.com/gpu" in lend.output
    audit = json.loads(cli("audit", "--object", "cq/team-a", "-o", "json").stdout)
    assert [e["action"] for e in audit["entries"]] == ["create"]


def test_lowering_below_usage_warns_and_lists_the_over_quota_workloads(
    cli: Invoke, applied: Path, engine: Engine
) -> None:
    for i in range(3):
        r = cli("submit", "-q", "default", "-n", "team-a", "--gpus", "8", "--name", f"w{i}")
        assert r.exit_code == 0, r.output
    _admit_all(engine)
    r = cli("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=8", "--drain")
    assert r.exit_code == 0, r.output
    assert "warning" in r.output and "2 admitted workloads are now over quota" in r.output
    assert "team-a/w1" in r.output and "team-a/w2" in r.output and "team-a/w0 " not in r.output
    doc = json.loads(cli("cq", "describe", "team-a", "-o", "json").stdout)
    assert doc["flavors"][0]["nominal"] == {"nvidia.com/gpu": 8, "cpu": 192_000}
    assert doc["usage"] == {"nvidia.com/gpu": 24} and doc["admitted"] == 3
    audit = json.loads(cli("audit", "--since", "1h", "--object", "cq/team-a", "-o", "json").stdout)
    lowered = audit["entries"][0]
    assert lowered["action"] == "quota-lowered" and lowered["after"]["policy"] == "drain"
    running = json.loads(cli("why", "w0", "-n", "team-a", "-o", "json").stdout)
    assert running["state"] == "Admitted" and "running on flavor h100" in running["message"]
    update = audit["entries"][1]
    assert update["action"] == "update"
    assert update["changes"]["flavors[0].nominal.nvidia.com/gpu"] == {"before": 16, "after": 8}
    assert update["before"]["flavors"][0]["nominal"]["nvidia.com/gpu"] == 16


def test_lowering_with_preempt_evicts_the_over_quota_workloads_in_the_same_change(
    cli: Invoke, applied: Path, engine: Engine
) -> None:
    for i in range(3):
        r = cli("submit", "-q", "default", "-n", "team-a", "--gpus", "8", "--name", f"w{i}")
        assert r.exit_code == 0, r.output
    _admit_all(engine)
    r = cli("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=8", "--preempt")
    assert r.exit_code == 0, r.output
    assert "preempted 2 workloads" in r.output
    doc = json.loads(cli("list", "-n", "team-a", "-o", "json").stdout)
    states = {w["name"]: (w["state"], w["reason"]) for w in doc["workloads"]}
    assert states == {
        "w0": ("Admitted", "Admitted"),
        "w1": ("Evicted", "QuotaLowered"),
        "w2": ("Evicted", "QuotaLowered"),
    }
    usage = json.loads(cli("cq", "describe", "team-a", "-o", "json").stdout)["usage"]
    assert usage == {"nvidia.com/gpu": 8}  # evicted workloads hold no quota
    audit = json.loads(cli("audit", "--since", "1h", "--object", "cq/team-a", "-o", "json").stdout)
    assert audit["entries"][0]["after"]["policy"] == "preempt"


def test_imperative_objects_round_trip(cli: Invoke, applied: Path) -> None:
    steps = [
        ("flavor", "create", "b200", "--label", "gpu=b200"),
        ("cohort", "create", "prod"),
        ("cq", "create", "team-c", "--cohort", "prod", "--nominal", "b200:nvidia.com/gpu=16"),
        ("cq", "edit", "team-c", "--weight", "3/2"),
        ("lq", "create", "default", "-n", "team-c", "--cluster-queue", "team-c"),
    ]
    for args in steps:
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)
    cq = json.loads(cli("cq", "describe", "team-c", "-o", "json").stdout)
    assert cq["weight"] == "3/2" and cq["cohort"] == "prod"
    assert cq["local_queues"] == ["team-c/default"]
    busy = cli("flavor", "delete", "b200")
    assert busy.exit_code == 1 and "team-c" in busy.output
    assert json.loads(cli("cohort", "describe", "prod", "-o", "json").stdout)["cluster_queues"] == [
        "team-c"
    ]
    for args in [
        ("lq", "delete", "default", "-n", "team-c"),
        ("cq", "delete", "team-c"),
        ("cohort", "delete", "prod"),
        ("flavor", "delete", "b200"),
    ]:
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)
    names = [f["name"] for f in json.loads(cli("flavor", "list", "-o", "json").stdout)["flavors"]]
    assert names == ["a100", "h100"]
    weight = cli("cq", "edit", "team-a", "--weight", "-1")
    assert weight.exit_code == 2 and "--weight" in weight.output
    history = cli("audit", "--object", "flavor/b200")
    assert history.exit_code == 0 and "deleted" in history.output and "created" in history.output


def test_orderings_from_the_command_line(cli: Invoke, applied: Path) -> None:
    steps = [
        ("cohort", "create", "prod", "--ordering", "usage"),
        ("cq", "create", "team-c", "--cohort", "prod", "--nominal", "h100:nvidia.com/gpu=8"),
        ("cq", "edit", "team-c", "--ordering", "fifo"),
    ]
    for args in steps:
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)
    assert json.loads(cli("cohort", "describe", "prod", "-o", "json").stdout)["ordering"] == "usage"
    assert json.loads(cli("cq", "describe", "team-c", "-o", "json").stdout)["ordering"] == "fifo"
    assert "Ordering:          fifo" in cli("cq", "describe", "team-c").stdout
    assert cli("cq", "edit", "team-c", "--ordering", "inherit").exit_code == 0
    assert json.loads(cli("cq", "describe", "team-c", "-o", "json").stdout)["ordering"] is None
    bad = cli("cq", "edit", "team-c", "--ordering", "random")
    assert bad.exit_code == 2 and "--ordering" in bad.output


def test_preemption_min_runtime_from_the_command_line(cli: Invoke, applied: Path) -> None:
    create = ("cq", "create", "team-c", "--nominal", "h100:nvidia.com/gpu=8")
    assert cli(*create, "--min-runtime", "90m").exit_code == 0
    doc = json.loads(cli("cq", "describe", "team-c", "-o", "json").stdout)
    assert doc["preemption_min_runtime"] == 5400
    assert "min-runtime=1h30m" in cli("cq", "describe", "team-c").stdout
    # Another preemption flag keeps it; its own flag changes it; 0 turns it off.
    assert cli("cq", "edit", "team-c", "--reclaim-within-cohort", "Any").exit_code == 0
    doc = json.loads(cli("cq", "describe", "team-c", "-o", "json").stdout)
    assert (doc["preemption_min_runtime"], doc["reclaim_within_cohort"]) == (5400, "Any")
    assert cli("cq", "edit", "team-c", "--min-runtime", "600").exit_code == 0
    assert (
        json.loads(cli("cq", "describe", "team-c", "-o", "json").stdout)["preemption_min_runtime"]
        == 600
    )
    assert cli("cq", "edit", "team-c", "--min-runtime", "0").exit_code == 0
    assert "min-runtime" not in cli("cq", "describe", "team-c").stdout
    bad = cli("cq", "edit", "team-c", "--min-runtime", "soon")
    assert bad.exit_code == 2 and "--min-runtime" in bad.output and "soon" in bad.output
    no_traceback(bad)
    history = cli("audit", "--object", "clusterqueue/team-c", "-o", "json")
    assert history.exit_code == 0, history.output
    afters = [e["after"]["preemption_min_runtime"] for e in json.loads(history.stdout)["entries"]]
    assert afters == [0, 600, 5400, 5400]  # newest first


def test_borrowing_max_runtime_from_the_command_line(cli: Invoke, applied: Path) -> None:
    create = ("cq", "create", "team-c", "--nominal", "h100:nvidia.com/gpu=8")
    assert cli(*create, "--borrowing-max-runtime", "3d").exit_code == 0
    doc = json.loads(cli("cq", "describe", "team-c", "-o", "json").stdout)
    assert doc["borrowing_max_runtime"] == 259200
    assert "max_runtime <= 72h00m" in cli("cq", "describe", "team-c").stdout
    # Another flag keeps it; "none" lets any workload borrow again.
    assert cli("cq", "edit", "team-c", "--weight", "2").exit_code == 0
    doc = json.loads(cli("cq", "describe", "team-c", "-o", "json").stdout)
    assert doc["borrowing_max_runtime"] == 259200
    assert cli("cq", "edit", "team-c", "--borrowing-max-runtime", "none").exit_code == 0
    assert "any workload" in cli("cq", "describe", "team-c").stdout
    for value in ("soon", "0", "-1h"):
        bad = cli("cq", "edit", "team-c", "--borrowing-max-runtime", value)
        assert bad.exit_code == 2, (value, bad.output)
        assert "--borrowing-max-runtime" in bad.output and value in bad.output
        no_traceback(bad)
    history = cli("audit", "--object", "clusterqueue/team-c", "-o", "json")
    afters = [e["after"]["borrowing_max_runtime"] for e in json.loads(history.stdout)["entries"]]
    assert afters == [None, 259200, 259200]  # newest first


def test_hostile_names_are_data_not_sql(cli: Invoke, applied: Path) -> None:
    hostile = "x'; DROP TABLE workloads; --\u00e9" + "z" * 10_000
    r = cli("cq", "describe", hostile)
    assert r.exit_code == 1 and "not found" in r.output  # looked up as data
    s = cli("submit", "-q", "default", "-n", "team-b", "--name", hostile, "--gpus", "1")
    assert s.exit_code == 2 and s.output.startswith("error: --name: bad name"), s.output[:300]
    ok = cli("submit", "-q", "default", "-n", "team-b", "--name", "after", "--gpus", "1")
    assert ok.exit_code == 0, ok.output[:300]  # the workloads table is still there
    listed = json.loads(cli("list", "-n", "team-b", "-o", "json").stdout)["workloads"]
    assert [w["name"] for w in listed] == ["after"]
