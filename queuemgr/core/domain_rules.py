"""Domain rules: how the domains of one node label are chosen, a policy knob's values.

Why it exists: the scheduler policy carries the rules (``SchedulerPolicy.domain_rules``,
a multi-cluster manager's dispatch policy among them) and ``core.domains`` applies
them; the two are siblings in the core's layers and import none of each other, so
the rules' vocabulary sits below both.

What must stay true: a rule is a frozen value, read by the cycle from its policy
only; without a rule for its label, a domain is chosen by best fit (``core.domains``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DomainChoice(enum.Enum):
    BEST_FIT = "best-fit"  # the least free dominant resource that holds it
    FIRST_FIT = "first-fit"  # the first in the rule's order that holds it
    MOST_FREE = "most-free"  # the most free dominant resource


@dataclass(frozen=True, kw_only=True, slots=True)
class DomainRule:
    """How the domains of one node label are chosen (core.domains); values not in ``order`` come
    after those in it, by value."""

    label: str
    choice: DomainChoice
    order: tuple[str, ...] = ()
