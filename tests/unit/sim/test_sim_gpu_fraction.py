"""Fractions of a GPU in a trace: the mapping rules, the rows that carry them, their errors."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuemgr.sim.gpu_fraction import (
    MIG_PROFILES,
    GpuFractionRule,
    parse_gpu_fraction_rule,
)
from queuemgr.sim.trace import TraceError, load_trace
from queuemgr.spec.checks import InputError

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_1G, MIG_2G, MIG_3G, MIG_4G, MIG_7G = (
    f"nvidia.com/mig-{p}" for p in ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
)

MAPPING = [
    # 0 is no GPU and 1000 one whole GPU under every rule.
    *(
        pytest.param(rule, 0, GPU, 0, id=f"{rule}-0-no-gpu")
        for rule in ("timeslice:4", "mig", "round-up")
    ),
    *(
        pytest.param(rule, 1000, GPU, 1, id=f"{rule}-1000-whole-gpu")
        for rule in ("timeslice:4", "mig", "round-up")
    ),
    pytest.param("timeslice:4", 1, SHARED, 1, id="timeslice4-1-at-least-one"),
    pytest.param("timeslice:4", 142, SHARED, 1, id="timeslice4-142"),
    pytest.param("timeslice:4", 143, SHARED, 1, id="timeslice4-143"),
    pytest.param("timeslice:4", 250, SHARED, 1, id="timeslice4-250-exactly-one"),
    pytest.param("timeslice:4", 251, SHARED, 2, id="timeslice4-251"),
    pytest.param("timeslice:4", 500, SHARED, 2, id="timeslice4-500"),
    pytest.param("timeslice:4", 999, SHARED, 4, id="timeslice4-999"),
    pytest.param("timeslice:7", 142, SHARED, 1, id="timeslice7-142"),
    pytest.param("timeslice:7", 143, SHARED, 2, id="timeslice7-143"),
    pytest.param("timeslice:10", 500, SHARED, 5, id="timeslice10-500"),
    pytest.param("timeslice:1", 1, SHARED, 1, id="timeslice1-1"),
    pytest.param("timeslice:1", 999, SHARED, 1, id="timeslice1-999"),
    pytest.param("timeslice:1000", 1, SHARED, 1, id="timeslice1000-1"),
    pytest.param("timeslice:1000", 999, SHARED, 999, id="timeslice1000-999"),
    pytest.param("mig", 1, MIG_1G, 1, id="mig-1"),
    pytest.param("mig", 142, MIG_1G, 1, id="mig-142-under-1/7"),
    pytest.param("mig", 143, MIG_2G, 1, id="mig-143-over-1/7"),
    pytest.param("mig", 285, MIG_2G, 1, id="mig-285"),
    pytest.param("mig", 286, MIG_3G, 1, id="mig-286"),
    pytest.param("mig", 428, MIG_3G, 1, id="mig-428"),
    pytest.param("mig", 429, MIG_4G, 1, id="mig-429"),
    pytest.param("mig", 500, MIG_4G, 1, id="mig-500"),
    pytest.param("mig", 571, MIG_4G, 1, id="mig-571"),
    pytest.param("mig", 572, MIG_7G, 1, id="mig-572"),
    pytest.param("mig", 999, MIG_7G, 1, id="mig-999"),
    pytest.param("round-up", 1, GPU, 1, id="round-up-1"),
    pytest.param("round-up", 142, GPU, 1, id="round-up-142"),
    pytest.param("round-up", 143, GPU, 1, id="round-up-143"),
    pytest.param("round-up", 500, GPU, 1, id="round-up-500"),
    pytest.param("round-up", 999, GPU, 1, id="round-up-999"),
]


@pytest.mark.parametrize(("rule", "milli", "resource", "amount"), MAPPING)
def test_mapping_rule(rule: str, milli: int, resource: str, amount: int) -> None:
    got = parse_gpu_fraction_rule(rule).request(milli)
    assert got == (resource, amount) and type(got[1]) is int


@given(st.integers(min_value=1, max_value=999), st.integers(min_value=1, max_value=1000))
def test_timeslice_is_the_exact_ceiling(milli: int, replicas: int) -> None:
    resource, amount = GpuFractionRule(kind="timeslice", replicas=replicas).request(milli)
    exact = Fraction(milli * replicas, 1000)
    assert resource == SHARED and 1 <= amount <= replicas
    assert amount - 1 < exact <= amount


@given(st.integers(min_value=1, max_value=999))
def test_mig_picks_the_smallest_profile_that_covers(milli: int) -> None:
    resource, amount = GpuFractionRule(kind="mig").request(milli)
    slices = dict((r, s) for s, r in MIG_PROFILES)[resource]
    assert amount == 1 and Fraction(milli, 1000) <= Fraction(slices, 7)
    assert all(Fraction(milli, 1000) > Fraction(s, 7) for s, _ in MIG_PROFILES if s < slices)


@pytest.mark.parametrize("milli", [-1, 1001], ids=["negative", "over-1000"])
def test_request_outside_0_to_1000_is_a_bug(milli: int) -> None:
    with pytest.raises(ValueError, match=r"0\.\.1000"):
        GpuFractionRule().request(milli)


RULES = [
    pytest.param("timeslice:4", "timeslice", 4, "timeslice:4", id="timeslice-4"),
    pytest.param("timeslice:1", "timeslice", 1, "timeslice:1", id="timeslice-1"),
    pytest.param("timeslice:1000", "timeslice", 1000, "timeslice:1000", id="timeslice-1000"),
    pytest.param("timeslice:007", "timeslice", 7, "timeslice:7", id="leading-zeros"),
    pytest.param("mig", "mig", 1, "mig", id="mig"),
    pytest.param("round-up", "round-up", 1, "round-up", id="round-up"),
]


@pytest.mark.parametrize(("text", "kind", "replicas", "canonical"), RULES)
def test_rules_parse(text: str, kind: str, replicas: int, canonical: str) -> None:
    rule = parse_gpu_fraction_rule(text, option="--trace-gpu-fraction")
    assert (rule.kind, rule.replicas, rule.text) == (kind, replicas, canonical)
    assert parse_gpu_fraction_rule(rule.text) == rule  # the summary's text reads back


def test_default_rule_is_timeslice_4() -> None:
    assert GpuFractionRule().text == "timeslice:4"
    assert GpuFractionRule(kind="mig", replicas=9) == GpuFractionRule(kind="mig")


BAD_RULES = [
    pytest.param("timeslice:0", "1 <= N <= 1000", id="zero-replicas"),
    pytest.param("timeslice:1001", "1 <= N <= 1000", id="too-many-replicas"),
    pytest.param("timeslice:9999999999", "expected timeslice:N", id="absurd-replicas"),
    pytest.param("timeslice", "expected timeslice:N", id="no-replicas"),
    pytest.param("timeslice:", "expected timeslice:N", id="empty-replicas"),
    pytest.param("timeslice:-4", "expected timeslice:N", id="negative-replicas"),
    pytest.param("timeslice:2.5", "expected timeslice:N", id="fractional-replicas"),
    pytest.param("timeslice: 4", "expected timeslice:N", id="space"),
    pytest.param("MIG", "expected timeslice:N", id="capitalised"),
    pytest.param("round_up", "expected timeslice:N", id="underscore"),
    pytest.param("", "expected timeslice:N", id="empty"),
]


@pytest.mark.parametrize(("text", "why"), BAD_RULES)
def test_bad_rules_name_the_option_and_value(text: str, why: str) -> None:
    with pytest.raises(InputError) as err:
        parse_gpu_fraction_rule(text, option="--trace-gpu-fraction")
    message = str(err.value)
    assert message.startswith("--trace-gpu-fraction: ")
    assert message.endswith(f"got {text!r}")
    assert why in message


COLUMNS = [
    "job_id",
    "tenant",
    "submit_s",
    "duration_s",
    "gpus_per_worker",
    "gpu_milli_per_worker",
    "workers",
    "cpus_per_worker",
    "mem_gib_per_worker",
]


def write(path: Path, rows: list[dict[str, str]], column: str = "gpu_milli_per_worker") -> Path:
    """A trace of ``rows``, each a valid 1-GPU job of tenant ``a`` unless it says otherwise."""
    header = [column if c == "gpu_milli_per_worker" else c for c in COLUMNS]
    base = {"tenant": "a", "submit_s": "0", "duration_s": "1", "gpus_per_worker": "1"}
    base |= {"workers": "1"}
    lines = [",".join(header)]
    for i, cells in enumerate(rows, start=1):
        full = {**base, "job_id": str(i), **cells}
        lines.append(",".join(full.get(c, "") for c in COLUMNS))
    path.write_text("\n".join(lines) + "\n")
    return path


ROWS = [
    # (gpus_per_worker, gpu_milli_per_worker) -> the request per pod, under timeslice:4.
    pytest.param("3", "", {GPU: 3}, None, id="empty-cell-whole-gpus"),
    pytest.param("0", "", {GPU: 0}, None, id="empty-cell-no-gpu"),
    pytest.param("0", "0", {GPU: 0}, None, id="0-thousandths-no-gpu"),
    pytest.param("0", "1", {SHARED: 1}, SHARED, id="1-thousandth"),
    pytest.param("0", "142", {SHARED: 1}, SHARED, id="142"),
    pytest.param("0", "143", {SHARED: 1}, SHARED, id="143"),
    pytest.param("0", "500", {SHARED: 2}, SHARED, id="half"),
    pytest.param("0", "999", {SHARED: 4}, SHARED, id="999"),
    pytest.param("0", " 500 ", {SHARED: 2}, SHARED, id="spaces-around"),
    pytest.param("1", "220", {SHARED: 1}, SHARED, id="openb-share-of-one-gpu"),
    pytest.param("0", "1000", {GPU: 1}, None, id="1000-is-one-whole-gpu"),
    pytest.param("1", "1000", {GPU: 1}, None, id="openb-one-whole-gpu"),
    pytest.param("8", "1000", {GPU: 8}, None, id="openb-eight-whole-gpus"),
]


@pytest.mark.parametrize(("gpus", "milli", "requests", "mapped"), ROWS)
def test_row_requests(
    tmp_path: Path, gpus: str, milli: str, requests: dict[str, int], mapped: str | None
) -> None:
    trace = write(tmp_path / "t.csv", [{"gpus_per_worker": gpus, "gpu_milli_per_worker": milli}])
    jobs = load_trace(trace, namespaces={"a"})
    (sw,) = jobs.workloads
    assert sw.workload.pod_sets[0].requests == requests
    resources = {mapped: 1} if mapped else {}
    assert jobs.gpu_fraction == {
        "rule": "timeslice:4",
        "jobs": len(resources),
        "resources": resources,
    }


def test_the_openb_name_gpu_milli_is_read_too(tmp_path: Path) -> None:
    rows = [{"gpus_per_worker": "1", "gpu_milli_per_worker": "500"}]
    trace = write(tmp_path / "t.csv", rows, column="gpu_milli")
    jobs = load_trace(trace, namespaces={"a"}, gpu_fraction="mig")
    assert jobs.workloads[0].workload.pod_sets[0].requests == {MIG_4G: 1}


def test_a_trace_without_the_column_asks_whole_gpus(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    header = ",".join(c for c in COLUMNS if c != "gpu_milli_per_worker")
    trace.write_text(header + "\n1,a,0,1,2,1,,\n")
    jobs = load_trace(trace, namespaces={"a"}, gpu_fraction="mig")
    assert jobs.workloads[0].workload.pod_sets[0].requests == {GPU: 2}
    assert jobs.gpu_fraction == {"rule": "mig", "jobs": 0, "resources": {}}


def test_the_summary_counts_mapped_jobs_per_resource_and_skips_unmatched(tmp_path: Path) -> None:
    rows = [
        {"gpus_per_worker": "0", "gpu_milli_per_worker": "100"},  # 1g
        {"gpus_per_worker": "0", "gpu_milli_per_worker": "142"},  # 1g, same resource
        {"gpus_per_worker": "0", "gpu_milli_per_worker": "999"},  # 7g
        {"gpus_per_worker": "0", "gpu_milli_per_worker": "1000"},  # whole: not the rule's
        {"gpus_per_worker": "2", "gpu_milli_per_worker": ""},  # whole: not the rule's
        {"gpus_per_worker": "0", "gpu_milli_per_worker": "500", "tenant": "x"},  # not simulated
    ]
    jobs = load_trace(write(tmp_path / "t.csv", rows), namespaces={"a"}, gpu_fraction="mig")
    assert len(jobs.workloads) == 5 and jobs.unmatched == {"x": 1}
    assert jobs.gpu_fraction == {
        "rule": "mig",
        "jobs": 3,
        "resources": {MIG_1G: 2, MIG_7G: 1},
    }


def test_equal_fraction_shapes_share_one_pod_set(tmp_path: Path) -> None:
    rows = [{"gpus_per_worker": "0", "gpu_milli_per_worker": "250", "cpus_per_worker": "2"}] * 2
    a, b = load_trace(write(tmp_path / "t.csv", rows), namespaces={"a"}).workloads
    assert a.workload.pod_sets is b.workload.pod_sets
    assert a.workload.pod_sets[0].requests == {SHARED: 1, "cpu": 2000}


BAD_ROWS = [
    pytest.param("0", "0.5", "expected an integer 0..1000", id="decimal"),
    pytest.param("0", "-1", "expected an integer 0..1000", id="negative"),
    pytest.param("0", "1001", "expected an integer 0..1000", id="over-1000"),
    pytest.param("0", "half", "expected an integer 0..1000", id="garbage"),
    pytest.param("0", "5_00", "expected an integer 0..1000", id="underscore"),
    pytest.param("0", "+500", "expected an integer 0..1000", id="plus-sign"),
    pytest.param("0", "50%", "expected an integer 0..1000", id="percent"),
    pytest.param("2", "0", "0 thousandths of a GPU, but gpus_per_worker is 2", id="zero-with-gpus"),
    pytest.param("2", "500", "a share of one GPU, but gpus_per_worker is 2", id="share-of-two"),
    pytest.param("8", "999", "a share of one GPU, but gpus_per_worker is 8", id="share-of-eight"),
]


@pytest.mark.parametrize("column", ["gpu_milli_per_worker", "gpu_milli"])
@pytest.mark.parametrize(("gpus", "milli", "why"), BAD_ROWS)
def test_bad_fractions_name_file_line_column_and_value(
    tmp_path: Path, gpus: str, milli: str, why: str, column: str
) -> None:
    rows = [{}, {"gpus_per_worker": gpus, "gpu_milli_per_worker": milli}]
    trace = write(tmp_path / "t.csv", rows, column=column)
    with pytest.raises(TraceError) as err:
        load_trace(trace, namespaces={"a"})
    message = str(err.value)
    assert message.startswith(f"t.csv:3: {column}: ")
    assert why in message
    assert message.endswith(repr(milli))


def test_both_names_of_the_column_are_an_error(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(",".join([*COLUMNS, "gpu_milli"]) + "\n1,a,0,1,0,500,1,,,500\n")
    with pytest.raises(TraceError, match=r"t\.csv: columns gpu_milli_per_worker and gpu_milli"):
        load_trace(trace, namespaces={"a"})
