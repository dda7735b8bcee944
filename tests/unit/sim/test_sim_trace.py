"""Trace loading: row mapping, quantities, tenant routing and assignment, runtime limits."""

from __future__ import annotations

import gzip
from collections import Counter
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuemgr.sim.trace import (
    MaxRuntimeRule,
    TenantAssigner,
    TraceError,
    load_trace,
    parse_max_runtime_rule,
)
from queuemgr.spec.checks import InputError

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


RULES = [
    pytest.param("auto", "auto", Fraction(1), "auto", id="auto"),
    pytest.param("none", "none", Fraction(1), "none", id="none"),
    pytest.param("column", "column", Fraction(1), "column", id="column"),
    pytest.param("actual", "actual", Fraction(1), "actual", id="actual"),
    pytest.param("actual*1", "actual", Fraction(1), "actual", id="actual-times-1"),
    pytest.param("actual*1.5", "actual", Fraction(3, 2), "actual*1.5", id="actual-times-1.5"),
    pytest.param("actual*2", "actual", Fraction(2), "actual*2", id="actual-times-2"),
    pytest.param("actual*1.050", "actual", Fraction(21, 20), "actual*1.05", id="trailing-zero"),
]


@pytest.mark.parametrize(("text", "kind", "factor", "canonical"), RULES)
def test_max_runtime_rules_parse(text: str, kind: str, factor: Fraction, canonical: str) -> None:
    rule = parse_max_runtime_rule(text, option="--trace-max-runtime")
    assert (rule.kind, rule.factor, rule.text) == (kind, factor, canonical)
    assert parse_max_runtime_rule(rule.text) == rule  # the summary's text reads back


BAD_RULES = [
    pytest.param("actual*0.5", "F >= 1", id="factor-below-1"),
    pytest.param("actual*0", "F >= 1", id="factor-zero"),
    pytest.param("actual*", "expected auto, none", id="no-factor"),
    pytest.param("actual*-2", "expected auto, none", id="negative-factor"),
    pytest.param("actual*1e3", "expected auto, none", id="exponent-factor"),
    pytest.param("actual*x", "expected auto, none", id="garbage-factor"),
    pytest.param("actual * 2", "expected auto, none", id="spaces"),
    pytest.param("Actual", "expected auto, none", id="capitalised"),
    pytest.param("max", "expected auto, none", id="unknown"),
    pytest.param("", "expected auto, none", id="empty"),
]


@pytest.mark.parametrize(("text", "why"), BAD_RULES)
def test_bad_max_runtime_rules_name_the_option_and_value(text: str, why: str) -> None:
    with pytest.raises(InputError) as err:
        parse_max_runtime_rule(text, option="--trace-max-runtime")
    message = str(err.value)
    assert message.startswith("--trace-max-runtime: ")
    assert message.endswith(f"got {text!r}")
    assert why in message


LIMIT_HEADER = HEADER.strip() + ",max_runtime_s\n"
# duration_s, max_runtime_s of three jobs of tenant a
LIMIT_ROWS = [("100", "7200"), ("10", ""), ("0", "0.5")]
EFFECTS = [
    pytest.param(LIMIT_HEADER, "auto", [7200.0, None, 0.5], id="auto-reads-the-column"),
    pytest.param(HEADER, "auto", [None, None, None], id="auto-without-column-as-before"),
    pytest.param(LIMIT_HEADER, "none", [None, None, None], id="none-ignores-the-column"),
    pytest.param(HEADER, "actual", [100.0, 10.0, 1.0], id="actual-at-least-1s"),
    # 10 x 1.1 is 11.000000000000002 in floats, which would round up to 12.
    pytest.param(HEADER, "actual*1.1", [110.0, 11.0, 1.0], id="actual-times-1.1-exact"),
    pytest.param(LIMIT_HEADER, "actual*2.5", [250.0, 25.0, 1.0], id="actual-ignores-the-column"),
]


@pytest.mark.parametrize(("header", "rule", "limits"), EFFECTS)
def test_max_runtime_rule_sets_the_workloads_limit(
    tmp_path: Path, header: str, rule: str, limits: list[float | None]
) -> None:
    trace = tmp_path / "t.csv"
    cells = [row(job_id=str(i), duration_s=d) for i, (d, _) in enumerate(LIMIT_ROWS)]
    if header == LIMIT_HEADER:
        cells = [c + "," + m for c, (_, m) in zip(cells, LIMIT_ROWS, strict=True)]
    trace.write_text(header + "".join(c + "\n" for c in cells))
    jobs = load_trace(trace, namespaces={"a"}, max_runtime=rule)
    assert [sw.workload.max_runtime for sw in jobs.workloads] == limits
    assert [sw.runtime for sw in jobs.workloads] == [100.0, 10.0, 0.0]  # runtimes untouched
    n = sum(limit is not None for limit in limits)
    assert jobs.max_runtime == {"rule": rule, "jobs": n}


def test_column_rule_takes_the_column(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(LIMIT_HEADER + row() + ",3600.5\n")
    jobs = load_trace(trace, namespaces={"a"}, max_runtime=MaxRuntimeRule(kind="column"))
    assert jobs.workloads[0].workload.max_runtime == 3600.5


BAD_LIMITS = [
    pytest.param("column", HEADER, None, "t.csv: missing columns: max_runtime_s", id="no-column"),
    pytest.param("column", LIMIT_HEADER, "", "t.csv:3: max_runtime_s: empty", id="empty-cell"),
    pytest.param("column", LIMIT_HEADER, " ", "t.csv:3: max_runtime_s: empty", id="blank-cell"),
    pytest.param(
        "auto", LIMIT_HEADER, "0", "t.csv:3: max_runtime_s: expected a positive", id="zero"
    ),
    pytest.param(
        "auto", LIMIT_HEADER, "-5", "t.csv:3: max_runtime_s: expected a non-neg", id="neg"
    ),
    pytest.param(
        "auto", LIMIT_HEADER, "1h", "t.csv:3: max_runtime_s: expected a number", id="unit"
    ),
    pytest.param("column", LIMIT_HEADER, "inf", "t.csv:3: max_runtime_s: expected a non", id="inf"),
]


@pytest.mark.parametrize(("rule", "header", "cell", "message"), BAD_LIMITS)
def test_bad_limits_name_file_line_column_and_value(
    tmp_path: Path, rule: str, header: str, cell: str | None, message: str
) -> None:
    trace = tmp_path / "t.csv"
    rows = [row(), row(job_id="2")]
    if cell is not None:
        rows = [rows[0] + ",60", rows[1] + "," + cell]
    trace.write_text(header + "".join(r + "\n" for r in rows))
    with pytest.raises(TraceError) as err:
        load_trace(trace, namespaces={"a"}, max_runtime=rule)
    assert str(err.value).startswith(message)
    if cell is None or not cell.strip():
        assert "'column'" in str(err.value)  # says which rule wants a value
    else:
        assert repr(cell) in str(err.value)


@given(
    st.decimals(min_value=0, max_value=10**9, places=3, allow_nan=False),
    st.integers(min_value=100, max_value=1000),
)
def test_actual_limits_never_cut_a_job_short(duration: Decimal, percent: int) -> None:
    factor = Fraction(percent, 100)
    runtime = float(duration)
    limit = MaxRuntimeRule(kind="actual", factor=factor).limit(runtime)
    exact = Fraction(repr(runtime)) * factor
    assert limit >= runtime and limit == int(limit)
    assert exact <= limit < max(exact + 1, 2)
