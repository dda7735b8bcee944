"""Trace loading: row mapping, tenant routing, unmatched tenants and seeded assignment."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from queuemgr.sim.trace import TenantAssigner, TraceError, load_trace

HEADER = "job_id,tenant,submit_s,duration_s,gpus_per_worker,workers,cpus_per_worker,"
HEADER += "mem_gib_per_worker,status\n"


def write_gz(path: Path, rows: list[str]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(HEADER + "".join(r + "\n" for r in rows))
    return path


def test_rows_become_gangs_in_the_tenant_namespace(tmp_path: Path) -> None:
    trace = write_gz(
        tmp_path / "t.csv.gz",
        ["7,team-a,1.5,60,8,4,16,64,Pass", "8,team-a,2,30,1,1,,,", "9,team-x,3,5,1,1,,,"],
    )
    jobs = load_trace(trace, namespaces={"team-a"})
    assert jobs.rows == 3
    first, second = (sw.workload for sw in jobs.workloads)
    assert (first.namespace, first.name, first.queue) == ("team-a", "job-7", "default")
    assert first.created_at == 1.5 and jobs.workloads[0].runtime == 60
    (ps,) = first.pod_sets
    assert (ps.name, ps.count) == ("workers", 4)
    assert ps.requests == {"nvidia.com/gpu": 8, "cpu": 16000, "memory": 64 * 2**30}
    assert second.pod_sets[0].requests == {"nvidia.com/gpu": 1}
    assert first.max_runtime is None and first.priority == 0
    assert jobs.unmatched == {"team-x": 1}
    assert jobs.tenants_assigned is None


def test_equal_shapes_share_one_pod_set(tmp_path: Path) -> None:
    trace = write_gz(tmp_path / "t.csv.gz", ["1,a,0,1,1,1,,,", "2,a,0,1,1,1,,,"])
    a, b = load_trace(trace, namespaces={"a"}).workloads
    assert a.workload.pod_sets is b.workload.pod_sets


def test_empty_tenant_needs_assign_tenants(tmp_path: Path) -> None:
    trace = write_gz(tmp_path / "t.csv.gz", ["1,,0,1,1,1,,,"])
    with pytest.raises(TraceError, match="--assign-tenants"):
        load_trace(trace, namespaces={"a"})


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("1,a,-1,1,1,1,,,", "t.csv:2: submit_s"),
        ("1,a,0,x,1,1,,,", "t.csv:2: duration_s"),
        ("1,a,0,1,1,0,,,", "t.csv:2: workers"),
        ("1,a,0,1,1,1,1.0005,,", "t.csv:2: cpus_per_worker"),
    ],
    ids=["negative-submit", "bad-duration", "zero-workers", "sub-millicore-cpu"],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + row + "\n")
    with pytest.raises(TraceError, match=message):
        load_trace(trace, namespaces={"a"})


def test_missing_column_is_an_error(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,tenant\n1,a\n")
    with pytest.raises(TraceError, match="missing columns: submit_s"):
        load_trace(trace, namespaces={"a"})


def test_assigned_tenants_are_seeded_and_labelled(tmp_path: Path) -> None:
    rows = [f"{i},,{i},10,1,1,,," for i in range(400)]
    trace = write_gz(tmp_path / "t.csv.gz", rows)
    spaces = {f"tenant-{k}" for k in range(3)}  # tenant-3 has no LocalQueue
    one = load_trace(trace, namespaces=spaces, assign_tenants=4, seed=1)
    again = load_trace(trace, namespaces=spaces, assign_tenants=4, seed=1)
    other = load_trace(trace, namespaces=spaces, assign_tenants=4, seed=2)
    names = [sw.workload.id for sw in one.workloads]
    assert names == [sw.workload.id for sw in again.workloads]
    assert names != [sw.workload.id for sw in other.workloads]
    assert one.tenants_assigned == {"rule": "zipf-s1-blake2b", "n": 4, "seed": 1, "jobs": 400}
    assert set(one.unmatched) == {"tenant-3"}
    assert len(one.workloads) + one.unmatched["tenant-3"] == 400


def test_assignment_is_roughly_zipf() -> None:
    assigner = TenantAssigner(4, seed=0)
    counts = Counter(assigner.tenant(str(i)) for i in range(20000))
    # Zipf(s=1) over 4 tenants: weights 1, 1/2, 1/3, 1/4 -> 48 %, 24 %, 16 %, 12 %.
    expected = [0.48, 0.24, 0.16, 0.12]
    for k, share in enumerate(expected):
        assert abs(counts[f"tenant-{k}"] / 20000 - share) < 0.02
