"""Names follow the Kubernetes rules: RFC 1123 labels and subdomains."""

from __future__ import annotations

import time

import pytest

from queuemgr.core.names import LABEL_MAX, SUBDOMAIN_MAX, NameRule, name_problem

LABEL, SUBDOMAIN = NameRule.LABEL, NameRule.SUBDOMAIN

CASES = {
    # id: (name, valid as a label, valid as a subdomain)
    "plain": ("team-a", True, True),
    "digits-first": ("0team", True, True),
    "one-char": ("a", True, True),
    "longest-label": ("a" * LABEL_MAX, True, True),
    "label-too-long": ("a" * (LABEL_MAX + 1), False, True),
    "dotted": ("gpu.h100", False, True),
    "longest-subdomain": (".".join(["a" * 63] * 3 + ["a" * 61]), False, True),
    "subdomain-too-long": ("a" * (SUBDOMAIN_MAX + 1), False, False),
    "upper-case": ("Team-A", False, False),
    "underscore": ("team_a", False, False),
    "leading-dash": ("-team", False, False),
    "trailing-dash": ("team-", False, False),
    "empty-part": ("gpu..h100", False, False),
    "space": ("team a", False, False),
    "surrounding-space": (" team-a", False, False),
    "newline": ("team-a\nteam-b", False, False),
    "trailing-newline": ("team-a\n", False, False),
    "ansi-escape": ("\x1b[31mteam", False, False),
    "slash": ("team/a", False, False),
    "unicode": ("équipe", False, False),
    "empty": ("", False, False),
}


@pytest.mark.parametrize(("name", "label", "subdomain"), list(CASES.values()), ids=list(CASES))
def test_a_name_is_valid_exactly_when_kubernetes_would_take_it(
    name: str, label: bool, subdomain: bool
) -> None:
    assert (name_problem(name, LABEL) is None) is label
    assert (name_problem(name, SUBDOMAIN) is None) is subdomain


def test_the_reason_says_which_rule_a_name_breaks() -> None:
    assert name_problem("a" * 100) == "a name is at most 63 characters, this one has 100"
    why = name_problem("Team_A")
    assert why is not None and "lower-case letters, digits and '-'" in why


def test_a_huge_name_is_refused_by_its_length_without_scanning_it() -> None:
    huge = "a" * 10_000_000 + "_"
    start = time.process_time()
    for _ in range(1000):
        assert name_problem(huge, SUBDOMAIN) is not None
    assert time.process_time() - start < 0.5  # a scan of 10 MB, 1000 times, takes seconds
