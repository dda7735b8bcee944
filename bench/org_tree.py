"""Who held what over time in bench/scenarios/org-tree.yaml, against the fair allocation.

The scenario runs through the simulator (the same ``schedule()`` as ``queuemgr serve``;
tests/integration/controller/test_serve_matches_simulate.py holds the service to the
same decisions on this file). At each sample time this prints the GPUs each team holds
and, beside them, the water-filling fair allocation for the demand of that moment
(jobs submitted and not finished), computed here from the scenario's tree alone, with
none of queuemgr's quota code:

- every node (team or cohort) first gets its demand, up to its subtree's nominal quota;
- what a cohort has beyond that (its own quota, and its children's unused quota) goes
  to the children that want more, in proportion to their weights, none beyond its
  demand (weighted max-min, "water-filling"), level by level from the root.

Usage:  python bench/org_tree.py [--scenario bench/scenarios/org-tree.yaml] [--times 600,...]
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from queuemgr.core.resources import GPU
from queuemgr.sim.engine import Engine
from queuemgr.spec.scenario import load_scenario

DEFAULT_TIMES = (600, 1500, 1900, 2400, 3000, 3600, 4800, 6000, 7200)


class Tree:
    """The scenario's cohorts and teams, read from the raw YAML."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.children: dict[str, list[str]] = {}
        self.weight: dict[str, Fraction] = {}
        self.own: dict[str, int] = {}
        self.roots: list[str] = []
        for c in raw.get("cohorts", []):
            name = c["name"]
            self.weight[name] = Fraction(str(c.get("weight", 1)))
            self.own[name] = sum(_gpus(q["nominal"]) for q in c.get("resources", []))
            if c.get("parent") is None:
                self.roots.append(name)
            else:
                self.children.setdefault(c["parent"], []).append(name)
        self.teams: list[str] = []
        for q in raw["cluster_queues"]:
            self.teams.append(q["name"])
            self.weight[q["name"]] = Fraction(str(q.get("weight", 1)))
            self.own[q["name"]] = sum(_gpus(r["nominal"]) for r in q["resources"])
            if q.get("cohort") is not None:
                self.children.setdefault(q["cohort"], []).append(q["name"])

    def quota(self, node: str) -> int:
        return self.own[node] + sum(self.quota(k) for k in self.children.get(node, []))

    def demand(self, node: str, demands: dict[str, int]) -> int:
        if node in demands or not self.children.get(node):
            return demands.get(node, 0)
        return sum(self.demand(k, demands) for k in self.children[node])

    def fair(self, demands: dict[str, int]) -> dict[str, Fraction]:
        out: dict[str, Fraction] = {}
        for root in self.roots:
            amount = Fraction(min(self.demand(root, demands), self.quota(root)))
            self._split(root, amount, demands, out)
        return out

    def _split(
        self, node: str, amount: Fraction, demands: dict[str, int], out: dict[str, Fraction]
    ) -> None:
        kids = self.children.get(node, [])
        if not kids:
            out[node] = amount
            return
        want = {k: Fraction(self.demand(k, demands)) for k in kids}
        give = {k: min(want[k], self.quota(k)) for k in kids}
        extra = amount - sum(give.values())
        hungry = [k for k in kids if want[k] > give[k]]
        while extra > 0 and hungry:
            total = sum(self.weight[k] for k in hungry)
            if total == 0:
                break
            level = extra / total  # the water rises by this much per unit of weight
            full = [k for k in hungry if want[k] - give[k] <= self.weight[k] * level]
            if not full:
                for k in hungry:
                    give[k] += self.weight[k] * level
                extra = Fraction(0)
                break
            for k in full:
                extra -= want[k] - give[k]
                give[k] = want[k]
            hungry = [k for k in hungry if k not in full]
        for k in kids:
            self._split(k, give[k], demands, out)


def _gpus(vec: dict[str, Any]) -> int:
    return int(vec.get(GPU, 0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", type=Path, default=Path("bench/scenarios/org-tree.yaml"))
    p.add_argument("--times", default=",".join(str(t) for t in DEFAULT_TIMES))
    args = p.parse_args(argv)
    raw = yaml.safe_load(args.scenario.read_text())
    tree = Tree(raw)
    scenario = load_scenario(args.scenario)
    events: list[dict[str, object]] = []
    engine = Engine(scenario.config, scenario.workloads, emit=events.append, policy=scenario.policy)
    teams = [t for t in tree.teams]
    print("t (s)  " + "  ".join(f"{t:>12}" for t in teams) + "   max |held - fair|")
    worst_after: dict[float, float] = {}
    for t in (float(x) for x in args.times.split(",")):
        engine.run(until=t)
        held = dict.fromkeys(teams, 0)
        for a in engine.cache.admitted():
            held[a.admission.cluster_queue] += a.held.get(GPU, 0)
        demands = dict.fromkeys(teams, 0)
        for e in events:
            ns = str(e["workload"]).split("/")[0]
            if e["event"] == "submitted":
                demands[ns] += 1
            elif e["event"] == "finished":
                demands[ns] -= 1
        fair = tree.fair(demands)
        gap = max(abs(held[k] - fair.get(k, 0)) for k in teams)
        worst_after[t] = float(gap)
        cells = "  ".join(f"{held[k]:>5} / {float(fair.get(k, 0)):>4.1f}" for k in teams)
        print(f"{t:>5.0f}  {cells}   {float(gap):.1f}")
    print("cells: GPUs held / water-filling fair allocation for the demand at that time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
