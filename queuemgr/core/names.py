"""Object names, by the rules Kubernetes applies to the objects they stand for.

Why it exists: a name typed into the CLI or a file becomes a namespace, a
queue, a Job, a node, a label value; a name Kubernetes would refuse
(``Team_A``, 100 characters, a newline, an escape sequence) must be refused
here too, with the rule it breaks, before it reaches the store or a table.

What must stay true: checking costs time bounded by the length limit, never by
the input (the length is checked before any pattern runs), and the rules are
Kubernetes' own: an RFC 1123 label (namespaces, queues, cohorts, pod sets) is at
most 63 characters of lower-case letters, digits and '-', starting and ending
with a letter or digit; an RFC 1123 subdomain (workloads, flavors, nodes,
replicas) is at most 253 characters of such labels joined by '.'.
"""

from __future__ import annotations

import re
from enum import Enum

LABEL_MAX = 63
SUBDOMAIN_MAX = 253

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class NameRule(Enum):
    LABEL = "label"
    SUBDOMAIN = "subdomain"


def name_problem(text: str, rule: NameRule = NameRule.LABEL) -> str | None:
    """Why ``text`` is not a valid name under ``rule``, or None when it is."""
    limit, pattern = (LABEL_MAX, _LABEL) if rule is NameRule.LABEL else (SUBDOMAIN_MAX, _SUBDOMAIN)
    if not text:
        return "a name must not be empty"
    if len(text) > limit:
        return f"a name is at most {limit} characters, this one has {len(text)}"
    if pattern.fullmatch(text) is None:
        allowed = "lower-case letters, digits and '-'"
        if rule is NameRule.SUBDOMAIN:
            allowed += ", in parts joined by '.'"
        return f"a name holds only {allowed}, and starts and ends with a letter or digit"
    return None
