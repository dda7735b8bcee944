"""The ``scheduler:`` knobs, read from YAML (a scenario file or the service's config).

Why it exists: the simulator and the service take the same knobs, and a bad
one must be refused the same way, naming the knob and the value.

What must stay true: every knob has a default (docs/scheduling.md lists
them), an unknown knob is an error, and the result is a core SchedulerPolicy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import yaml

from queuemgr.core.fairshare import DEFAULT_WEIGHTS
from queuemgr.core.policy import Ordering, OverrunPolicy, PreemptorAdmission, SchedulerPolicy
from queuemgr.core.resources import parse_resource_name
from queuemgr.core.values import shown
from queuemgr.spec import checks as y
from queuemgr.spec.checks import ScenarioError, at

KNOBS = (
    "reservation_depth",
    "largest_reservations",
    "largest_min_gpus",
    "overrun_policy",
    "preemptor_admission",
    "ordering",
    "usage_half_life",
    "usage_resource_weights",
    "requeue_backoff_base",
    "requeue_backoff_max",
    "victim_stop_delay",
)
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
# A longer duration is a typo, and one of about 3e11 s no longer fits a datetime.
MAX_DURATION = 100 * 365 * 86400.0
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(raw: object, path: str, *, zero: bool = False) -> float:
    """Seconds from ``3600``, ``90m``, ``12h``, ``7d`` or ``2w``; positive (or 0 if ``zero``)."""
    if isinstance(raw, bool):
        raise ScenarioError(f"{path}: expected a duration such as 7d, got {shown(raw)}")
    if isinstance(raw, int | float):
        seconds = float(raw)
    else:
        match = _DURATION.match(str(raw).strip())
        if not match:
            raise ScenarioError(f"{path}: expected a duration such as 7d, got {shown(raw)}")
        seconds = float(match[1]) * _UNIT[match[2]]
    if seconds < 0 or (seconds == 0 and not zero) or seconds != seconds:
        raise ScenarioError(
            f"{path}: must be {'0 or more' if zero else 'positive'}, got {shown(raw)}"
        )
    if seconds > MAX_DURATION:  # also .inf; datetimes overflow not far beyond
        raise ScenarioError(f"{path}: at most {MAX_DURATION:.0f} s (100 years), got {shown(raw)}")
    return seconds


def _choice(raw: object, path: str, choices: list[str]) -> str:
    if raw not in choices:
        raise ScenarioError(f"{path}: expected one of {choices}, got {shown(raw)}")
    return str(raw)


def parse_policy(raw: object, path: str) -> SchedulerPolicy:
    m = y.mapping(raw, path, optional=KNOBS)
    depth = y.integer(m.get("reservation_depth", 1), at(path, "reservation_depth"), minimum=0)
    largest = y.integer(
        m.get("largest_reservations", 0), at(path, "largest_reservations"), minimum=0
    )
    largest_min = y.integer(m.get("largest_min_gpus", 0), at(path, "largest_min_gpus"), minimum=0)
    admission = _choice(
        m.get("preemptor_admission", PreemptorAdmission.AFTER_VICTIMS_STOP.value),
        at(path, "preemptor_admission"),
        [p.value for p in PreemptorAdmission],
    )
    ordering = _choice(
        m.get("ordering", Ordering.FIFO.value), at(path, "ordering"), [o.value for o in Ordering]
    )
    overrun = _choice(
        m.get("overrun_policy", OverrunPolicy.EXTEND.value),
        at(path, "overrun_policy"),
        [o.value for o in OverrunPolicy],
    )
    half_life = parse_duration(m.get("usage_half_life", "7d"), at(path, "usage_half_life"))
    defaults = SchedulerPolicy()
    backoff = {
        knob: parse_duration(m.get(knob, getattr(defaults, knob)), at(path, knob), zero=True)
        for knob in ("requeue_backoff_base", "requeue_backoff_max", "victim_stop_delay")
    }
    weights = dict(DEFAULT_WEIGHTS)
    if "usage_resource_weights" in m:
        wpath = at(path, "usage_resource_weights")
        raw_weights = m["usage_resource_weights"]
        if not isinstance(raw_weights, dict) or not raw_weights:
            raise ScenarioError(f"{wpath}: expected a mapping of resource to weight")
        weights = {
            parse_resource_name(k, field=at(wpath, str(k))): y.number(v, at(wpath, str(k)))
            for k, v in raw_weights.items()
        }
    return SchedulerPolicy(
        reservation_depth=depth,
        largest_reservations=largest,
        largest_min_gpus=largest_min,
        overrun_policy=OverrunPolicy(overrun),
        preemptor_admission=PreemptorAdmission(admission),
        ordering=Ordering(ordering),
        usage_half_life=half_life,
        usage_resource_weights=weights,
        requeue_backoff_base=backoff["requeue_backoff_base"],
        requeue_backoff_max=backoff["requeue_backoff_max"],
        victim_stop_delay=backoff["victim_stop_delay"],
    )


def policy_knobs(policy: SchedulerPolicy) -> dict[str, object]:
    """The ``scheduler:`` mapping that :func:`parse_policy` turns back into ``policy``."""
    return {
        "reservation_depth": policy.reservation_depth,
        "largest_reservations": policy.largest_reservations,
        "largest_min_gpus": policy.largest_min_gpus,
        "overrun_policy": policy.overrun_policy.value,
        "preemptor_admission": policy.preemptor_admission.value,
        "ordering": policy.ordering.value,
        "usage_half_life": policy.usage_half_life,
        "usage_resource_weights": dict(policy.usage_resource_weights),
        "requeue_backoff_base": policy.requeue_backoff_base,
        "requeue_backoff_max": policy.requeue_backoff_max,
        "victim_stop_delay": policy.victim_stop_delay,
    }


def override_policy(
    policy: SchedulerPolicy, overrides: Iterable[str], path: str
) -> SchedulerPolicy:
    """``policy`` with ``KNOB=VALUE`` overrides applied, checked like the file's own knobs."""
    raw = policy_knobs(policy)
    for item in overrides:
        knob, sep, value = item.partition("=")
        if not sep or not knob:
            raise ScenarioError(f"{path}: expected KNOB=VALUE, got {shown(item)}")
        raw[knob] = yaml.safe_load(value)
    return parse_policy(raw, path)
