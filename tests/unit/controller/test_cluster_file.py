"""A cluster file gives the simulated cluster's objects and nothing that decides."""

from __future__ import annotations

from pathlib import Path

import pytest

from queuemgr.controller.simulated import load_cluster_file
from queuemgr.spec.scenario import ScenarioError

NODES = (
    "flavors: [{name: default}]\n"
    "nodes: [{name: n1, flavor: default, allocatable: {nvidia.com/gpu: 8}}]\n"
)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        pytest.param("scheduler: {reservation_depth: 2}\n", "scheduler", id="scheduler"),
        pytest.param("scheduler: {}\n", "scheduler", id="empty-scheduler"),
        pytest.param(
            "workloads: [{name: w, namespace: a, queue: q, at: 0, runtime: 1}]\n",
            "workloads",
            id="workloads",
        ),
    ],
)
def test_what_a_cluster_file_may_not_hold_is_refused_by_name(
    tmp_path: Path, extra: str, field: str
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(NODES + extra)
    with pytest.raises(ScenarioError, match=rf"^{field}: "):
        load_cluster_file(path)


def test_a_cluster_file_without_them_loads(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(NODES)
    assert list(load_cluster_file(path).nodes) == ["n1"]
