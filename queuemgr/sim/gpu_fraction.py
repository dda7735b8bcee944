"""Map a trace pod's fraction of a GPU to a resource Kubernetes can count.

Why it exists: some traces (Alibaba's ``openb_pod_list``) ask for thousandths of a
GPU, shared by time-slicing or MIG. Kubernetes counts only whole units of an
extended resource, so a fraction becomes whole units of a shared-GPU resource by
a documented rule (docs/simulate.md, "Fractions of a GPU"):

- ``timeslice:N``: each GPU is advertised as ``N`` replicas of
  ``nvidia.com/gpu.shared`` (the NVIDIA device plugin's time-slicing, renamed);
  a pod asking ``f`` thousandths takes ``ceil(f * N / 1000)`` of them;
- ``mig``: one partition of the smallest A100-40GB MIG profile whose compute
  slices out of 7 cover the fraction (``f * 7 <= slices * 1000``);
- ``round-up``: ``ceil(f / 1000)`` whole ``nvidia.com/gpu``, no sharing.

What must stay true: the arithmetic is on integers only (a float would move a
boundary such as 142/1000 against 1/7); 0 thousandths is no GPU and 1000 is one
whole ``nvidia.com/gpu`` under every rule; a rule's ``text`` reads back through
:func:`parse_gpu_fraction_rule`, so the summary names the rule exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from queuemgr.core.resources import GPU, ResourceName
from queuemgr.spec.checks import InputError

MILLI = 1000  # thousandths of a GPU in a whole one
SHARED_GPU = ResourceName("nvidia.com/gpu.shared")
# A100-40GB MIG profiles as (compute slices out of MIG_SLICES, resource), smallest first.
MIG_SLICES = 7
MIG_PROFILES: tuple[tuple[int, ResourceName], ...] = (
    (1, ResourceName("nvidia.com/mig-1g.5gb")),
    (2, ResourceName("nvidia.com/mig-2g.10gb")),
    (3, ResourceName("nvidia.com/mig-3g.20gb")),
    (4, ResourceName("nvidia.com/mig-4g.20gb")),
    (7, ResourceName("nvidia.com/mig-7g.40gb")),
)
MAX_REPLICAS = MILLI  # finer than a thousandth would only rescale the same counts
DEFAULT_RULE = "timeslice:4"
_TIMESLICE = re.compile(r"timeslice:(?P<n>[0-9]{1,9})")

Kind = Literal["timeslice", "mig", "round-up"]


@dataclass(frozen=True, kw_only=True)
class GpuFractionRule:
    """How a pod's ``f`` thousandths of a GPU (0 <= f <= 1000) become a request.

    ``replicas`` is the ``N`` of ``timeslice:N`` (1 <= N <= 1000); the other rules
    have none, and hold 1 there whatever they were given, so that equal rules are equal.
    """

    kind: Kind = "timeslice"
    replicas: int = 4

    def __post_init__(self) -> None:
        if self.kind != "timeslice":
            object.__setattr__(self, "replicas", 1)
        elif not 1 <= self.replicas <= MAX_REPLICAS:
            raise InputError(f"gpu fraction: no rule timeslice:{self.replicas}")

    @property
    def text(self) -> str:
        """The rule as :func:`parse_gpu_fraction_rule` reads it (``"timeslice:4"``)."""
        return f"timeslice:{self.replicas}" if self.kind == "timeslice" else self.kind

    def request(self, milli: int) -> tuple[ResourceName, int]:
        """The resource and the count of it a pod asking ``milli`` thousandths takes."""
        if not 0 <= milli <= MILLI:
            raise ValueError(f"a fraction of a GPU is 0..{MILLI} thousandths, got {milli}")
        if milli in (0, MILLI):
            return GPU, milli // MILLI  # no GPU, or one whole GPU: nothing to share
        if self.kind == "timeslice":
            return SHARED_GPU, -(-milli * self.replicas // MILLI)  # ceil, at least 1
        if self.kind == "mig":
            # The smallest profile with milli / 1000 <= slices / 7, compared exactly.
            return next(r for s, r in MIG_PROFILES if milli * MIG_SLICES <= s * MILLI), 1
        return GPU, 1  # round-up: ceil(milli / 1000) is 1 for 0 < milli < 1000

    def resources(self) -> tuple[ResourceName, ...]:
        """The resources this rule maps a fraction 0 < f < 1000 to."""
        if self.kind == "timeslice":
            return (SHARED_GPU,)
        if self.kind == "mig":
            return tuple(r for _, r in MIG_PROFILES)
        return (GPU,)


def parse_gpu_fraction_rule(text: str, *, option: str = "gpu_fraction") -> GpuFractionRule:
    """``timeslice:N`` (1 <= N <= 1000), ``mig`` or ``round-up``."""
    if text == "mig":
        return GpuFractionRule(kind="mig")
    if text == "round-up":
        return GpuFractionRule(kind="round-up")
    why = "expected timeslice:N, mig or round-up"
    match = _TIMESLICE.fullmatch(text)
    if match:
        replicas = int(match["n"])
        if 1 <= replicas <= MAX_REPLICAS:
            return GpuFractionRule(kind="timeslice", replicas=replicas)
        why = f"expected replicas 1 <= N <= {MAX_REPLICAS} in timeslice:N"
    raise InputError(f"{option}: {why}, got {text!r}")
