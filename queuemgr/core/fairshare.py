"""Usage-aware fair share: how much each LocalQueue has used lately, decayed.

Why it exists: dominant resource share only sees what runs now, so a tenant
who ran a week of big jobs yesterday competes today as if it had run nothing.
Kueue's Admission Fair Sharing answers with a usage that decays with a
half-life; queuemgr does the same for LocalQueues (and ClusterQueues):

- ``alpha = 1 - 0.5 ** (elapsed / half_life)``;
- ``usage = usage * (1 - alpha) + current * alpha``, where ``current`` is what
  was held during the elapsed time, weighted per resource (GPUs by default).

What must stay true: the tracker is advanced before any change of what is
held, so each interval is charged at the rate actually held during it; usage
is never negative; the same events give the same usage (no wall clock here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from queuemgr.core.resources import GPU, ResourceName, Resources

LocalQueueKey = tuple[str, str]  # (namespace, name)

DEFAULT_WEIGHTS: Mapping[ResourceName, float] = {GPU: 1.0}


def alpha(elapsed: float, half_life: float) -> float:
    if elapsed <= 0:
        return 0.0
    return 1.0 - float(0.5 ** (elapsed / half_life))


def decayed(usage: float, current: float, elapsed: float, half_life: float) -> float:
    a = alpha(elapsed, half_life)
    return usage * (1.0 - a) + current * a


def weighted(held: Resources, weights: Mapping[ResourceName, float]) -> float:
    return sum(held.get(r, 0) * w for r, w in weights.items())


@dataclass(kw_only=True, slots=True)
class _Entry:
    usage: float = 0.0
    current: float = 0.0


class UsageTracker:
    """Decayed usage per LocalQueue, advanced by the caller's clock (virtual or real)."""

    def __init__(
        self, *, half_life: float, weights: Mapping[ResourceName, float] = DEFAULT_WEIGHTS
    ) -> None:
        if half_life <= 0:
            raise ValueError(f"usage_half_life: must be positive, got {half_life!r}")
        self.half_life = half_life
        self.weights = dict(weights)
        self._entries: dict[LocalQueueKey, _Entry] = {}
        self._now: float | None = None

    def advance(self, now: float) -> None:
        """Charge every queue for what it held since the last call."""
        if self._now is not None and now > self._now:
            elapsed = now - self._now
            for e in self._entries.values():
                e.usage = decayed(e.usage, e.current, elapsed, self.half_life)
        if self._now is None or now > self._now:
            self._now = now

    def hold(self, queue: LocalQueueKey, resources: Resources, sign: int) -> None:
        """Start (+1) or stop (-1) holding ``resources``; call ``advance`` first."""
        e = self._entries.setdefault(queue, _Entry())
        e.current = max(0.0, e.current + sign * weighted(resources, self.weights))

    def seed(self, queue: LocalQueueKey, usage: float) -> None:
        """Start from a known history (e.g. usage samples kept in the store)."""
        self._entries.setdefault(queue, _Entry()).usage = max(0.0, usage)

    def set_held(self, held: Mapping[LocalQueueKey, Resources]) -> None:
        """Replace what every queue holds (a service that reloads its state each cycle)."""
        for key, e in self._entries.items():
            e.current = weighted(held[key], self.weights) if key in held else 0.0
        for key in held.keys() - self._entries.keys():
            self._entries[key] = _Entry(current=weighted(held[key], self.weights))

    def usage(self) -> dict[LocalQueueKey, float]:
        return {k: e.usage for k, e in self._entries.items()}
