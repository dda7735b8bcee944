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


COLUMNS = HEADER.strip().split(",")
GiB = 2**30


def row(**cells: str) -> str:
    """One CSV row: a valid 1-GPU job of tenant ``a`` unless ``cells`` say otherwise."""
    base = {"job_id": "1", "tenant": "a", "submit_s": "0", "duration_s": "1"}
    base |= {"gpus_per_worker": "1", "workers": "1"}
    return ",".join({**base, **cells}.get(c, "") for c in COLUMNS)


QUANTITIES = [
    # Kubernetes rounds a quantity finer than the smallest unit up; so does the loader.
    pytest.param(
        {"mem_gib_per_worker": "29.8018"},
        "memory",
        -(-298018 * GiB // 10**4),
        id="fractional-gib-rounds-up",
    ),
    pytest.param({"mem_gib_per_worker": "64"}, "memory", 64 * GiB, id="whole-gib"),
    pytest.param({"mem_gib_per_worker": "0.5"}, "memory", GiB // 2, id="half-gib-exact"),
    pytest.param({"mem_gib_per_worker": ".25"}, "memory", GiB // 4, id="leading-dot"),
    pytest.param({"mem_gib_per_worker": "1e3"}, "memory", 1000 * GiB, id="exponent"),
    pytest.param({"mem_gib_per_worker": "1e-9"}, "memory", 2, id="sub-byte-rounds-up"),
    pytest.param({"mem_gib_per_worker": "0"}, "memory", 0, id="zero-gib"),
    pytest.param({"cpus_per_worker": "1.0005"}, "cpu", 1001, id="sub-millicore-rounds-up"),
    pytest.param({"cpus_per_worker": "2"}, "cpu", 2000, id="whole-cores"),
    pytest.param({"cpus_per_worker": "500m"}, "cpu", 500, id="millicores"),
    pytest.param({"gpus_per_worker": "8"}, "nvidia.com/gpu", 8, id="gpus"),
]


@pytest.mark.parametrize(("cells", "resource", "amount"), QUANTITIES)
def test_requests_per_worker(
    tmp_path: Path, cells: dict[str, str], resource: str, amount: int
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + row(**cells) + "\n")
    (sw,) = load_trace(trace, namespaces={"a"}).workloads
    got = sw.workload.pod_sets[0].requests[resource]
    assert got == amount and type(got) is int


BAD_ROWS = [
    pytest.param({"submit_s": "-1"}, "submit_s", id="negative-submit"),
    pytest.param({"duration_s": "x"}, "duration_s", id="bad-duration"),
    pytest.param({"workers": "0"}, "workers", id="zero-workers"),
    pytest.param({"workers": "1.5"}, "workers", id="fractional-workers"),
    # A GPU is never rounded: Kubernetes takes whole extended resources only.
    pytest.param({"gpus_per_worker": "0.5"}, "gpus_per_worker", id="fractional-gpu"),
    pytest.param({"gpus_per_worker": "-1"}, "gpus_per_worker", id="negative-gpu"),
    pytest.param({"gpus_per_worker": "many"}, "gpus_per_worker", id="garbage-gpu"),
    pytest.param({"mem_gib_per_worker": "-29.8018"}, "mem_gib_per_worker", id="negative-mem"),
    pytest.param({"mem_gib_per_worker": "lots"}, "mem_gib_per_worker", id="garbage-mem"),
    pytest.param({"mem_gib_per_worker": "64Gi"}, "mem_gib_per_worker", id="unit-in-gib-column"),
    pytest.param({"mem_gib_per_worker": "nan"}, "mem_gib_per_worker", id="nan-mem"),
    pytest.param({"mem_gib_per_worker": "1e99999"}, "mem_gib_per_worker", id="huge-exponent"),
    pytest.param({"cpus_per_worker": "-1"}, "cpus_per_worker", id="negative-cpu"),
    pytest.param({"cpus_per_worker": "12x"}, "cpus_per_worker", id="garbage-cpu"),
]


@pytest.mark.parametrize(("cells", "column"), BAD_ROWS)
def test_bad_rows_name_file_line_column_and_value(
    tmp_path: Path, cells: dict[str, str], column: str
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + row() + "\n" + row(job_id="2", **cells) + "\n")
    with pytest.raises(TraceError) as err:
        load_trace(trace, namespaces={"a"})
    assert str(err.value).startswith(f"t.csv:3: {column}: ")
    assert str(err.value).endswith(repr(cells[column]))


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
