"""Kubernetes label selectors: which namespaces queuemgr manages.

Why it exists: an operator says which namespaces are managed with a label
selector, in Kubernetes' own forms: the JSON ``LabelSelector`` of the webhook
configurations' ``namespaceSelector`` and the string form of ``kubectl -l``
(``queuemgr.io/managed=true,team in (a,b),!legacy``). The same selector is
written into the webhook configurations (so the API server filters first) and
checked by the webhook itself.

What must stay true: the empty selector matches everything, as in
Kubernetes; requirements are ANDed; parsing rejects what Kubernetes rejects
with a ``ValueError`` naming the bad part; ``as_json`` and ``from_json`` round
trip.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, kw_only=True, slots=True)
class Requirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.operator not in _OPERATORS:
            raise ValueError(f"label selector {self.key!r}: unknown operator {self.operator!r}")
        if (self.operator in ("In", "NotIn")) != bool(self.values):
            raise ValueError(
                f"label selector {self.key!r}: {self.operator} takes values iff In/NotIn"
            )

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


@dataclass(frozen=True, kw_only=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            out["matchExpressions"] = [
                {
                    "key": r.key,
                    "operator": r.operator,
                    **({"values": list(r.values)} if r.values else {}),
                }
                for r in self.match_expressions
            ]
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LabelSelector:
        labels = raw.get("matchLabels") or {}
        exprs = raw.get("matchExpressions") or []
        if not isinstance(labels, Mapping) or not isinstance(exprs, list):
            raise ValueError(f"bad label selector {dict(raw)!r}")
        return cls(
            match_labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
            match_expressions=tuple(
                Requirement(
                    key=str(e.get("key", "")),
                    operator=str(e.get("operator", "")),
                    values=tuple(str(v) for v in e.get("values") or ()),
                )
                for e in exprs
            ),
        )

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """The ``kubectl -l`` form: ``a=b,c!=d,e in (f,g),h notin (i),j,!k``."""
        labels: list[tuple[str, str]] = []
        exprs: list[Requirement] = []
        for part in _split(text):
            if m := _SET.fullmatch(part):
                values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
                if not values:
                    raise ValueError(f"label selector {part!r}: an empty set of values")
                op = "In" if m["op"].lower() == "in" else "NotIn"
                exprs.append(Requirement(key=_key(m["key"], part), operator=op, values=values))
            elif m := _EQUALITY.fullmatch(part):
                key, value = _key(m["key"], part), m["value"].strip()
                if m["op"] == "!=":
                    exprs.append(Requirement(key=key, operator="NotIn", values=(value,)))
                else:
                    labels.append((key, value))
            elif part.startswith("!"):
                exprs.append(Requirement(key=_key(part[1:], part), operator="DoesNotExist"))
            else:
                exprs.append(Requirement(key=_key(part, part), operator="Exists"))
        return cls(match_labels=tuple(sorted(labels)), match_expressions=tuple(exprs))


_SET = re.compile(r"\s*(?P<key>[^\s=!(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*", re.I)
_EQUALITY = re.compile(r"\s*(?P<key>[^\s=!(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s=!(),]*)\s*")
_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _key(key: str, part: str) -> str:
    key = key.strip()
    if not _KEY.fullmatch(key):
        raise ValueError(f"label selector {part!r}: bad label key {key!r}")
    return key


def _split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0 or depth > 1:
            raise ValueError(f"label selector {text!r}: unbalanced parentheses")
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if depth:
        raise ValueError(f"label selector {text!r}: unbalanced parentheses")
    parts.append(current.strip())
    if parts == [""]:
        return []
    if "" in parts:
        raise ValueError(f"label selector {text!r}: an empty requirement")
    return parts
