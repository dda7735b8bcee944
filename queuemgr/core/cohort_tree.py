"""The tree of cohorts: who lends to whom, from a team up to the organisation.

Why it exists: an organisation shares GPUs as a tree, not as a flat list of
teams (Kueue's hierarchical cohorts, KAI Scheduler's and Volcano's n-level
queues). Quota, fairness, reclaim, reasons and metrics all ask the same few
questions of that tree (a cohort's parent, its root, its path, how deep two
ClusterQueues' common ancestor is), and they are answered here once per config.

What must stay true: the tree has no cycle and no parent that does not exist
(``tree_error`` names the path, and a config refuses both); a cohort's
``chain`` runs from itself up to its root, so its last element is the root;
paths are "root/…/cohort", unique because cohort names are.
"""

from __future__ import annotations

from collections.abc import Mapping

from queuemgr.core.model import Cohort, CohortName


class CohortTreeError(ValueError):
    """A cycle among cohorts' parents, or a parent that does not exist."""


# Levels of cohorts a tree may have, the root included: an organisation needs a handful,
# and the bound keeps every walk up a tree (and the chains kept per cohort) short
# whatever a config holds.
MAX_LEVELS = 16


def tree_error(parents: Mapping[CohortName, CohortName | None]) -> str | None:
    """What is wrong with the tree ``parents`` describes, or None when it is a forest.

    Each cohort maps to its parent; the message names the offending path, so an admin
    sees which edges to change ("cohort a: its parent b does not exist", "cohorts form
    a cycle: a -> b -> a", "cohort x is more than 16 levels deep: x -> ..."). The first
    problem in name order is reported, so the same input always gives the same message.
    Time: at most MAX_LEVELS steps per cohort, whatever the input.
    """
    for name in sorted(parents):
        parent = parents[name]
        if parent is not None and parent not in parents:
            return f"cohort {name}: its parent {parent} does not exist"
    levels: dict[CohortName, int] = {}  # cohorts known to be in a tree, and their level
    for start in sorted(parents):
        path: list[CohortName] = []
        at: dict[CohortName, int] = {}
        up: CohortName | None = start
        while up is not None and up not in levels:
            if up in at:
                loop = [*path[at[up] :], up]
                return "cohorts form a cycle: " + " -> ".join(loop)
            if len(path) == MAX_LEVELS:
                return (
                    f"cohort {start} is more than {MAX_LEVELS} levels deep: "
                    + " -> ".join(path)
                    + " -> ..."
                )
            at[up] = len(path)
            path.append(up)
            up = parents[up]
        below = levels[up] + 1 if up is not None else 1
        if below + len(path) - 1 > MAX_LEVELS:
            return (
                f"cohort {start} is more than {MAX_LEVELS} levels deep: "
                + " -> ".join(path)
                + " -> ..."
            )
        for i, c in enumerate(reversed(path)):
            levels[c] = below + i
    return None


class CohortTree:
    """Parents, roots, depths and paths of a config's cohorts."""

    def __init__(self, cohorts: Mapping[CohortName, Cohort]) -> None:
        parents = {name: c.parent for name, c in cohorts.items()}
        problem = tree_error(parents)
        if problem is not None:
            raise CohortTreeError(problem)
        self.parent: dict[CohortName, CohortName | None] = parents
        self.chain: dict[CohortName, tuple[CohortName, ...]] = {}
        for name in sorted(parents):
            chain = [name]
            up = parents[name]
            while up is not None:
                chain.append(up)
                up = parents[up]
            self.chain[name] = tuple(chain)
        self._paths = {name: "/".join(reversed(chain)) for name, chain in self.chain.items()}
        self.children: dict[CohortName, list[CohortName]] = {}
        for name in sorted(parents):
            up = parents[name]
            if up is not None:
                self.children.setdefault(up, []).append(name)

    def root(self, cohort: CohortName) -> CohortName:
        return self.chain[cohort][-1]

    def depth(self, cohort: CohortName) -> int:
        """0 for a root, 1 for its children, and so on."""
        return len(self.chain[cohort]) - 1

    def path(self, cohort: CohortName) -> str:
        """The name a metric label or a reason gives it: "root/…/cohort"."""
        return self._paths[cohort]

    @property
    def flat(self) -> bool:
        """Whether every cohort is a root: the one-level model, with no tree at all."""
        return all(p is None for p in self.parent.values())

    def deepest_first(self) -> list[CohortName]:
        """Every cohort with a parent, children before their parents."""
        return sorted(
            (n for n, p in self.parent.items() if p is not None),
            key=lambda n: (-len(self.chain[n]), n),
        )

    def top_down(self) -> list[CohortName]:
        """Every cohort, parents before children (by depth, then name): the order to
        write a tree in, so that no write names a parent not yet written."""
        return sorted(self.chain, key=lambda n: (len(self.chain[n]), n))
