"""Resource weights: a ClusterQueue's dominant share counts one resource in another's units.

Why it exists: nodes may advertise MIG partitions (``nvidia.com/mig-1g.10gb``) or
time-sliced GPUs (``nvidia.com/gpu.shared``) as resources of their own. Dominant
resource fairness then counts each as a dimension of its own, so a tenant holding
half of the 1g.10gb slices looks as greedy as one holding half of the full GPUs,
though seven slices are one GPU's compute. A ClusterQueue's ``resource_weights``
say that one unit of a resource R counts as N/D units of a target T (by default
``nvidia.com/gpu``) in its dominant share: R's borrowing and R's share denominator
are folded into T's, and R is no dimension of its own (docs/scheduling.md).

What must stay true:

- N and D are positive integers, kept exactly as written; no float anywhere;
- a weight never names its own resource as its target, a resource is weighted
  at most once, and no target is itself weighted (no chains R -> T -> U);
- folding multiplies every amount by one scale (the least common multiple of the
  denominators), so folded vectors stay integers and a ratio of two folded
  vectors is the ratio of the weighted amounts, exactly;
- only fairness folds: quota checks, node fit and the cohort's own shares never do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from queuemgr.core.resources import GPU, ResourceName, Resources


@dataclass(frozen=True, kw_only=True, slots=True)
class ResourceWeight:
    """In its ClusterQueue's dominant share, one ``resource`` counts as
    ``numerator/denominator`` of ``counts_as``."""

    resource: ResourceName
    numerator: int
    denominator: int = 1
    counts_as: ResourceName = GPU

    def __post_init__(self) -> None:
        for name, value in (("numerator", self.numerator), ("denominator", self.denominator)):
            if type(value) is not int or value <= 0:  # bool is an int; floats are never exact
                raise ValueError(
                    f"resource_weights: {name} of {self.resource} must be a positive "
                    f"integer, got {value!r}"
                )

    @property
    def fraction(self) -> Fraction:
        return Fraction(self.numerator, self.denominator)

    def __str__(self) -> str:
        """As the command line writes it: ``RES=N/D:TARGET``."""
        return f"{self.resource}={self.numerator}/{self.denominator}:{self.counts_as}"


def weights_problem(weights: Sequence[ResourceWeight]) -> tuple[int, str] | None:
    """The index of the first weight that breaks a rule, and why; None when all hold.

    The message names the resources, so a caller prefixing its own path (a YAML
    path, a flag) gives a complete error.
    """
    weighted: dict[ResourceName, int] = {}
    for i, w in enumerate(weights):
        if w.resource == w.counts_as:
            return i, f"{w.resource} cannot count as itself"
        if w.resource in weighted:
            return i, f"{w.resource} is weighted twice (first at [{weighted[w.resource]}])"
        weighted[w.resource] = i
    for i, w in enumerate(weights):
        if w.counts_as in weighted:
            return i, (
                f"{w.resource} counts as {w.counts_as}, which is itself weighted "
                f"(at [{weighted[w.counts_as]}]); weights do not chain: name the final "
                "resource as the target"
            )
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class ShareFold:
    """A ClusterQueue's weights, ready to fold the vectors its dominant share divides.

    Every amount is multiplied by ``scale``; a weighted resource's goes to its target,
    times its weight, exactly: ``factor = numerator * scale / denominator``, an integer.
    """

    into: Mapping[ResourceName, tuple[ResourceName, int]]  # R -> (T, factor)
    scale: int

    @staticmethod
    def of(weights: Sequence[ResourceWeight]) -> ShareFold | None:
        """The fold of ``weights``; None without any (the share is then unchanged)."""
        if not weights:
            return None
        scale = math.lcm(*(w.denominator for w in weights))
        into = {w.resource: (w.counts_as, w.numerator * (scale // w.denominator)) for w in weights}
        return ShareFold(into=into, scale=scale)

    def apply(self, amounts: Resources) -> dict[ResourceName, int]:
        """``amounts`` with each weighted resource counted in its target's units, all
        times ``scale``: ``out[T] = scale * (amounts[T] + sum of amounts[R] * N/D)``."""
        out: dict[ResourceName, int] = {}
        into, scale = self.into, self.scale
        for r, v in amounts.items():
            target = into.get(r)
            if target is None:
                out[r] = out.get(r, 0) + v * scale
            else:
                t, factor = target
                out[t] = out.get(t, 0) + v * factor
        return out
