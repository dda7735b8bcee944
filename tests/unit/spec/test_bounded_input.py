"""Hostile files and values cost bounded time and memory, and get a clear error.

Each case runs ``queuemgr simulate`` (whose readers every file-reading command
shares) in a child process under an address-space limit, with a timeout; the
limit is the child's own baseline plus 100 MB, measured by a harmless run first.
The child's CPU time is held to that run's plus 1 s: before the bounds, the
huge exponent alone cost 18 to 20 s of CPU before failing.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from queuemgr.spec.checks import MAX_FILE_BYTES, MAX_NODES, load_bounded
from queuemgr.spec.knobs import MAX_DURATION
from queuemgr.spec.scenario import ScenarioError, load_scenario

BOUND_BYTES = 100 << 20
BOUND_CPU_S = 1.0
PRIORITY = "    priority: 3000000000\n"  # beyond a PriorityClass value
QUICKSTART = Path(__file__).resolve().parents[3] / "docs" / "examples" / "quickstart.yaml"
NODES = "flavors: [{name: default}]\n"


def _node(gpu: str) -> str:
    node = f"{{name: n1, flavor: default, allocatable: {{nvidia.com/gpu: {gpu}}}}}"
    return NODES + f"nodes: [{node}]\ncluster_queues: []\n"


def _laughs(levels: int, width: int = 9) -> str:
    """A "billion laughs" file: ``width ** levels`` strings from a few hundred bytes."""
    lines = ["x0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"x{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n" + _node(f"*l{levels - 1}")


@dataclass(frozen=True)
class Run:
    returncode: int
    stderr: str
    cpu_s: float  # user + system time of the child


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run_limited(args: list[str], limit: int | None) -> Run:
    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    code = (
        "import sys; from queuemgr.cli.main import main\n"
        "sys.argv = ['queuemgr', *sys.argv[1:]]\nmain()"
    )
    before = _children_cpu()  # this process waits for one child at a time
    r = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=cap,
        check=False,
    )
    return Run(r.returncode, r.stderr, _children_cpu() - before)


@dataclass(frozen=True)
class Baseline:
    peak_bytes: int  # the child's peak address space
    cpu_s: float


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    """A small valid scenario's child: its peak address space and its CPU time."""
    path = tmp_path_factory.mktemp("baseline") / "ok.yaml"
    path.write_text(NODES + "nodes: []\ncluster_queues: []\nworkloads: []\n")
    code = (
        "import resource, sys; from queuemgr.cli.main import main\n"
        f"sys.argv = ['queuemgr', 'simulate', {str(path)!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(open('/proc/self/status').read().split('VmPeak:')[1].split()[0])"
    )
    before = _children_cpu()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    cpu = _children_cpu() - before
    return Baseline(int(out.stdout.strip().splitlines()[-1]) * 1024, cpu)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(_laughs(10), "expands to more than", id="billion-laughs"),
        pytest.param("a: &a [1, *a]\n", "recursive alias", id="recursive-alias"),
        pytest.param(
            _node("1e10000000"),
            "nodes[0].allocatable.nvidia.com/gpu: quantity out of range",
            id="huge-exponent",
        ),
        pytest.param(
            _node("9" * 5000),  # an int() of over 4,300 digits: a bare ValueError before
            "nodes[0].allocatable.nvidia.com/gpu: quantity out of range",
            id="5000-digit-integer",
        ),
        pytest.param(
            _node(".inf"),
            "nodes[0].allocatable.nvidia.com/gpu: bad quantity",
            id="inf-quantity",
        ),
        pytest.param(
            QUICKSTART.read_text().replace("    pod_sets:", PRIORITY + "    pod_sets:", 1),
            "].priority: expected an integer <= 2147483647",
            id="priority-beyond-int32",
        ),
        pytest.param(
            NODES + "nodes: []\nflavors_typo: " + "x" * (5 << 20) + "\n",
            "unknown field",
            id="5-MB-name",
        ),
    ],
)
def test_a_hostile_file_is_refused_within_bounds(
    tmp_path: Path, baseline: Baseline, text: str, message: str
) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    r = _run_limited(["simulate", str(path)], baseline.peak_bytes + BOUND_BYTES)
    assert r.returncode == 2, r.stderr[-500:]
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr[-500:]
    assert len(r.stderr) < 2_000  # the value is quoted, not dumped
    assert r.cpu_s <= baseline.cpu_s + BOUND_CPU_S, (r.cpu_s, baseline.cpu_s)


def test_an_endless_file_is_read_no_further_than_the_limit(baseline: Baseline) -> None:
    r = _run_limited(["simulate", "/dev/zero"], baseline.peak_bytes + BOUND_BYTES)
    assert r.returncode == 2, r.stderr[-500:]
    assert f"larger than {MAX_FILE_BYTES} bytes" in r.stderr
    assert r.cpu_s <= baseline.cpu_s + BOUND_CPU_S, (r.cpu_s, baseline.cpu_s)


def test_aliases_within_the_budget_are_data() -> None:
    doc = load_bounded("base: &b {cpu: 1}\nuses: [*b, *b, *b]\n")
    assert doc == {"base": {"cpu": 1}, "uses": [{"cpu": 1}] * 3}
    assert MAX_NODES >= 100_000  # far above any hand-written file


def test_a_duration_beyond_a_century_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        NODES + "nodes: []\ncluster_queues: []\nworkloads: []\n"
        "scheduler: {usage_half_life: 99999999999999999999d}\n"
    )
    with pytest.raises(ScenarioError, match=r"^scheduler.usage_half_life: at most"):
        load_scenario(path)
    assert MAX_DURATION < 2**40
