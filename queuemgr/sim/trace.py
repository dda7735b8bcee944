"""Load a job trace (CSV, optionally gzipped) into workloads for the simulator.

Why it exists: traces such as Philly's are the realistic load; they hold jobs,
not Kubernetes objects, so each row becomes one single-pod-set gang
(``workers`` pods of ``gpus_per_worker`` GPUs) in the tenant's namespace,
submitted to its LocalQueue ``default``.

What must stay true:

- no job is silently dropped: rows whose tenant has no ``default`` LocalQueue
  are counted per tenant in ``unmatched`` (and not simulated);
- tenants invented by ``--assign-tenants`` are labelled as such
  (``TraceJobs.tenants_assigned``), never passed off as trace data, and are a
  pure function of (seed, job_id), so a rerun reproduces them exactly;
- a declared runtime limit (``max_runtime``) comes from the trace's optional
  ``max_runtime_s`` column or from a documented rule (:class:`MaxRuntimeRule`);
  limits made up by a rule are labelled as such (``TraceJobs.max_runtime``);
- a fraction of a GPU (the optional ``gpu_milli_per_worker`` column, alias
  ``gpu_milli``) becomes whole units of a shared-GPU resource only by a documented
  rule (:class:`GpuFractionRule`), named with the jobs it mapped
  (``TraceJobs.gpu_fraction``);
- parsing stays linear and cheap: equal job shapes share one ``PodSet``.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import hashlib
import io
import math
import re
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Literal

from queuemgr.core.model import PodSet, Workload
from queuemgr.core.resources import (
    CPU,
    GPU,
    MEMORY,
    QuantityError,
    ResourceName,
    parse_quantity,
)
from queuemgr.sim.gpu_fraction import (
    DEFAULT_RULE,
    MILLI,
    GpuFractionRule,
    parse_gpu_fraction_rule,
)
from queuemgr.spec.checks import InputError
from queuemgr.spec.scenario import SimWorkload

REQUIRED_COLUMNS = (
    "job_id",
    "tenant",
    "submit_s",
    "duration_s",
    "gpus_per_worker",
    "workers",
    "cpus_per_worker",
    "mem_gib_per_worker",
)
MAX_RUNTIME_COLUMN = "max_runtime_s"
MILLI_COLUMN = "gpu_milli_per_worker"
MILLI_ALIAS = "gpu_milli"  # the column's name in Alibaba's openb_pod_list traces
ASSIGN_RULE = "zipf-s1-blake2b"
_FACTOR = re.compile(r"actual\*(?P<f>\d+(?:\.\d+)?)")
_MILLI = re.compile(r"^\s*[0-9]{1,4}\s*$")  # int() would also take "1_0" and "+5"
_GIB = re.compile(r"^\s*(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,3})?\s*$")
QUEUE = "default"
# gpus_per_worker, (fraction column's name, its cell), workers, cpus, mem: one job shape
_Shape = tuple[str, tuple[str, str | None], str, str, str]


class TraceError(InputError):
    """A trace that cannot be read; the message names the file, line and column."""


@dataclass(frozen=True, kw_only=True)
class MaxRuntimeRule:
    """Where each trace job's declared runtime limit comes from (docs/simulate.md).

    ``auto``: the ``max_runtime_s`` column where a row has a value, else no limit;
    ``none``: no limit (the column is ignored); ``column``: the column, required on
    every row; ``actual``: the job's real duration times ``factor`` (>= 1), rounded
    up to whole seconds and at least 1 s: the perfect-knowledge rule.
    """

    kind: Literal["auto", "none", "column", "actual"] = "auto"
    factor: Fraction = Fraction(1)  # only for "actual"

    def __post_init__(self) -> None:
        if self.factor < 1 or (self.kind != "actual" and self.factor != 1):
            raise InputError(f"max_runtime: no rule {self.kind}*{self.factor}")

    @property
    def text(self) -> str:
        """The rule as ``parse_max_runtime_rule`` reads it (``"actual*1.5"``)."""
        if self.factor == 1:
            return self.kind
        return f"actual*{_decimal(self.factor)}"

    def limit(self, runtime: float) -> float:
        """The ``actual`` rule's limit for a job that runs ``runtime`` seconds."""
        # Exact, from the decimal the trace gave (repr round-trips it): a float product
        # could land a hair above a whole second and round up one second too far.
        # A limit must be positive, so a zero-second job declares 1 s.
        return float(max(1, math.ceil(Fraction(repr(runtime)) * self.factor)))


def parse_max_runtime_rule(text: str, *, option: str = "max_runtime") -> MaxRuntimeRule:
    """``none``, ``auto``, ``column``, ``actual`` or ``actual*F`` (F a decimal >= 1)."""
    kinds: dict[str, Literal["auto", "none", "column", "actual"]] = {
        "auto": "auto",
        "none": "none",
        "column": "column",
        "actual": "actual",
    }
    if text in kinds:
        return MaxRuntimeRule(kind=kinds[text])
    match = _FACTOR.fullmatch(text)
    if match and Fraction(match["f"]) >= 1:
        return MaxRuntimeRule(kind="actual", factor=Fraction(match["f"]))
    why = "expected auto, none, column, actual or actual*F with F a decimal >= 1"
    if match:
        # A user who declares a limit from the job's duration declares one at least
        # that long; a shorter one would only measure evictions of the rule's making.
        why = "expected a factor F >= 1 in actual*F"
    raise InputError(f"{option}: {why}, got {text!r}")


def _decimal(x: Fraction) -> str:
    """``x`` in decimal when it has one (3/2 -> ``"1.5"``), else ``"p/q"``."""
    # A denominator 2**a * 5**b divides 10**max(a, b), and max(a, b) < its bit length.
    for k in range(x.denominator.bit_length() + 1):
        if 10**k % x.denominator == 0:
            digits = str(x.numerator * 10**k // x.denominator).rjust(k + 1, "0")
            return f"{digits[:-k]}.{digits[-k:]}" if k else digits
    return str(x)


@dataclass(frozen=True, kw_only=True)
class TraceJobs:
    workloads: list[SimWorkload]
    rows: int
    unmatched: dict[str, int] = field(default_factory=dict)  # tenant -> jobs not simulated
    tenants_assigned: dict[str, object] | None = None
    # {"rule": the MaxRuntimeRule's text, "jobs": simulated jobs given a limit}
    max_runtime: dict[str, object] = field(default_factory=dict)
    # {"rule": the GpuFractionRule's text, "jobs": simulated jobs whose fraction of a
    # GPU the rule mapped, "resources": {resource: those jobs asking it}}
    gpu_fraction: dict[str, object] = field(default_factory=dict)


class TenantAssigner:
    """Zipf(s=1) tenant choice driven by a hash of (seed, job_id); see docs/simulate.md.

    ``u = blake2b(f"{seed}:{job_id}", digest_size=8) / 2**64`` is uniform in
    [0, 1); tenant ``k`` is the first whose cumulative weight, with weights
    ``1/(k+1)`` normalised to sum 1, exceeds ``u``.
    """

    def __init__(self, n: int, seed: int) -> None:
        if n < 1:
            raise InputError(f"--assign-tenants: expected a count >= 1, got {n}")
        self.n = n
        self.seed = seed
        weights = [1.0 / (k + 1) for k in range(n)]
        total = math.fsum(weights)
        acc = 0.0
        self._cdf: list[float] = []
        for w in weights:
            acc += w / total
            self._cdf.append(acc)
        self._cdf[-1] = 1.0  # guard against rounding leaving u in no bucket

    def tenant(self, job_id: str) -> str:
        digest = hashlib.blake2b(f"{self.seed}:{job_id}".encode(), digest_size=8).digest()
        u = int.from_bytes(digest, "big") / 2.0**64
        return f"tenant-{min(bisect.bisect_right(self._cdf, u), self.n - 1)}"


def load_trace(
    path: Path,
    *,
    namespaces: Set[str],
    assign_tenants: int | None = None,
    seed: int = 0,
    max_runtime: MaxRuntimeRule | str = "auto",
    gpu_fraction: GpuFractionRule | str = DEFAULT_RULE,
) -> TraceJobs:
    """Read ``path``; ``namespaces`` are those holding a LocalQueue named ``default``.

    ``max_runtime`` is a :class:`MaxRuntimeRule` or its text (``"actual*1.5"``);
    ``gpu_fraction`` a :class:`GpuFractionRule` or its text (``"mig"``).
    """
    rule = max_runtime
    if isinstance(rule, str):
        rule = parse_max_runtime_rule(rule)
    share = gpu_fraction
    if isinstance(share, str):
        share = parse_gpu_fraction_rule(share)
    assigner = TenantAssigner(assign_tenants, seed) if assign_tenants is not None else None
    workloads: list[SimWorkload] = []
    unmatched: dict[str, int] = {}
    shapes: dict[_Shape, tuple[tuple[PodSet, ...], ResourceName | None]] = {}
    shared: dict[str, int] = {}  # resource -> simulated jobs the fraction rule mapped to it
    seen: set[str] = set()
    rows = assigned = limited = 0
    required: tuple[str, ...] = REQUIRED_COLUMNS
    if rule.kind == "column":
        required += (MAX_RUNTIME_COLUMN,)
    for line, row in _rows(path, required, rule):
        rows += 1
        where = f"{path.name}:{line}"
        job_id = _job_id(row, seen, where)
        tenant = row["tenant"].strip()
        if not tenant:
            tenant = _assigned(assigner, job_id, where)
            assigned += 1
        if tenant not in namespaces:
            unmatched[tenant] = unmatched.get(tenant, 0) + 1
            continue
        milli = row.get(MILLI_COLUMN)
        key = (
            row["gpus_per_worker"],
            (MILLI_COLUMN, milli) if milli is not None else (MILLI_ALIAS, row.get(MILLI_ALIAS)),
            row["workers"],
            row["cpus_per_worker"] or "",
            row["mem_gib_per_worker"] or "",
        )
        shape = shapes.get(key)
        if shape is None:
            shape = _pod_sets(key, share, where)
            shapes[key] = shape
        pod_sets, mapped = shape
        if mapped is not None:
            shared[mapped] = shared.get(mapped, 0) + 1
        submit = _seconds(row["submit_s"], f"{where}: submit_s")
        runtime = _seconds(row["duration_s"], f"{where}: duration_s")
        limit = _max_runtime(rule, row.get(MAX_RUNTIME_COLUMN), runtime, where)
        limited += limit is not None
        workloads.append(
            SimWorkload(
                workload=Workload(
                    namespace=tenant,
                    name=f"job-{job_id}",
                    queue=QUEUE,
                    pod_sets=pod_sets,
                    created_at=submit,
                    max_runtime=limit,
                ),
                runtime=runtime,
            )
        )
    info: dict[str, object] | None = None
    if assigner is not None:
        info = {"rule": ASSIGN_RULE, "n": assigner.n, "seed": seed, "jobs": assigned}
    return TraceJobs(
        workloads=workloads,
        rows=rows,
        unmatched=unmatched,
        tenants_assigned=info,
        max_runtime={"rule": rule.text, "jobs": limited},
        gpu_fraction={
            "rule": share.text,
            "jobs": sum(shared.values()),
            "resources": dict(sorted(shared.items())),
        },
    )


def _job_id(row: Mapping[str, str], seen: set[str], where: str) -> str:
    """The row's job id, refused when empty or seen before (it names the workload)."""
    job_id = row["job_id"].strip()
    if not job_id:
        raise TraceError(f"{where}: job_id: empty")
    if job_id in seen:
        raise TraceError(f"{where}: job_id: duplicate {job_id!r}")
    seen.add(job_id)
    return job_id


def _assigned(assigner: TenantAssigner | None, job_id: str, where: str) -> str:
    """The tenant the documented rule gives a row without one; an error without the rule."""
    if assigner is None:
        raise TraceError(
            f"{where}: tenant: empty; pass --assign-tenants N to assign tenants "
            f"(the trace has none)"
        )
    return assigner.tenant(job_id)


def _max_runtime(
    rule: MaxRuntimeRule, text: str | None, runtime: float, where: str
) -> float | None:
    if rule.kind == "none":
        return None
    if rule.kind == "actual":
        return rule.limit(runtime)
    if text is None or not text.strip():
        if rule.kind == "column":
            raise TraceError(
                f"{where}: {MAX_RUNTIME_COLUMN}: empty, and the max-runtime rule "
                f"{rule.text!r} needs a limit on every row"
            )
        return None
    field = f"{where}: {MAX_RUNTIME_COLUMN}"
    value = _seconds(text, field)
    if value == 0:
        raise TraceError(f"{field}: expected a positive number of seconds, got {text!r}")
    return value


def _rows(
    path: Path, required: tuple[str, ...], rule: MaxRuntimeRule
) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise TraceError(f"cannot read trace: {exc}") from None
    with raw:
        binary = gzip.GzipFile(fileobj=raw) if path.name.endswith(".gz") else raw
        text = io.TextIOWrapper(binary, encoding="utf-8", newline="")
        try:
            reader = csv.DictReader(text)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if MILLI_COLUMN in header and MILLI_ALIAS in header:
                raise TraceError(
                    f"{path.name}: columns {MILLI_COLUMN} and {MILLI_ALIAS} are one column "
                    f"under two names; keep one"
                )
            if missing:
                needs = ""
                if MAX_RUNTIME_COLUMN in missing:
                    needs = f" (the max-runtime rule {rule.text!r} reads {MAX_RUNTIME_COLUMN})"
                raise TraceError(f"{path.name}: missing columns: {', '.join(missing)}{needs}")
            for row in reader:
                # reader.line_num counts physical lines, header included.
                if None in row.values():
                    raise TraceError(f"{path.name}:{reader.line_num}: too few columns")
                yield reader.line_num, row
        except (OSError, EOFError, UnicodeDecodeError, csv.Error) as exc:
            raise TraceError(f"{path.name}: cannot read trace: {exc}") from None


def _seconds(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"{where}: expected a non-negative number of seconds, got {text!r}")
    return value


def _count(text: str, where: str, *, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise TraceError(f"{where}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise TraceError(f"{where}: expected an integer >= {minimum}, got {text!r}")
    return value


def _gib(text: str, where: str) -> int:
    """A number of GiB (``29.8018``, ``1e3``) as bytes, rounded up as Kubernetes does."""
    # Exact decimal arithmetic, as in core.resources: a float is off in its last bits,
    # which can move the rounded-up byte. The exponent is bounded so that one bad row
    # cannot make Fraction build a power of ten of millions of digits.
    if not _GIB.match(text):
        raise TraceError(f"{where}: expected a non-negative number of GiB, got {text!r}")
    return math.ceil(Fraction(text.strip()) * 2**30)


def _pod_sets(
    key: _Shape, rule: GpuFractionRule, where: str
) -> tuple[tuple[PodSet, ...], ResourceName | None]:
    """The job's pod set, and the resource the fraction rule mapped it to (if it did)."""
    gpus, (column, milli), workers, cpus, mem = key
    resource, amount, mapped = _gpu_request(gpus, column, milli, rule, where)
    requests: dict[ResourceName, int] = {resource: amount}
    try:
        if cpus:
            requests[CPU] = parse_quantity(cpus, resource=CPU, field=f"{where}: cpus_per_worker")
    except QuantityError as exc:
        raise TraceError(str(exc)) from None
    if mem:
        requests[MEMORY] = _gib(mem, f"{where}: mem_gib_per_worker")
    pod_set = PodSet(
        name="workers",
        count=_count(workers, f"{where}: workers", minimum=1),
        requests=requests,
    )
    return (pod_set,), resource if mapped else None


def _gpu_request(
    gpus_text: str, column: str, text: str | None, rule: GpuFractionRule, where: str
) -> tuple[ResourceName, int, bool]:
    """The GPU request per pod: (resource, count, whether the fraction rule chose it).

    An empty cell is no fraction: ``gpus_per_worker`` whole GPUs. Otherwise ``f``
    (0..1000 thousandths) with ``gpus_per_worker`` ``g``: ``f = 0`` needs ``g = 0``
    (no GPU); ``0 < f < 1000`` is a share of one GPU, so ``g`` is 0 or 1 (openb
    writes 1) and the rule maps it; ``f = 1000`` is ``max(g, 1)`` whole GPUs (openb
    writes 1000 on its whole-GPU rows).
    """
    gpus = _count(gpus_text, f"{where}: gpus_per_worker", minimum=0)
    if text is None or not text.strip():
        return GPU, gpus, False
    field = f"{where}: {column}"
    milli = int(text) if _MILLI.match(text) else -1
    if not 0 <= milli <= MILLI:
        raise TraceError(
            f"{field}: expected an integer 0..{MILLI} (thousandths of a GPU), got {text!r}"
        )
    if milli == 0 and gpus > 0:
        raise TraceError(
            f"{field}: 0 thousandths of a GPU, but gpus_per_worker is {gpus}: leave the "
            f"cell empty for whole GPUs, got {text!r}"
        )
    if 0 < milli < MILLI and gpus > 1:
        raise TraceError(
            f"{field}: a fraction is a share of one GPU, but gpus_per_worker is {gpus} "
            f"(0 or 1 with a fraction), got {text!r}"
        )
    if milli == MILLI:
        return GPU, max(gpus, 1), False
    resource, amount = rule.request(milli)
    return resource, amount, milli > 0
