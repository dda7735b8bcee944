"""``kubernetes.admission_checks``: each check's controller, class and backoff, bad values
named by their YAML path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from queuemgr.controller.kube_section import AdmissionCheckSettings
from queuemgr.service.settings import ConfigError, load_config

SECTION = """
backend: kubernetes
kubernetes:
  admission_checks:
    - name: provisioning-request
      controller: provisioning-request
      provisioning_class: check-capacity.autoscaling.x-k8s.io
    - name: atomic
      controller: provisioning-request
      provisioning_class: best-effort-atomic-scale-up.autoscaling.x-k8s.io
      parameters: {ValidUntilSeconds: "600"}
      backoff: 5
      backoff_max: 20
      retry_limit: 3
"""


def test_the_checks_are_read(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(SECTION)
    k = load_config(path, env={}).kubernetes
    assert k.admission_checks == (
        AdmissionCheckSettings(
            name="provisioning-request",
            provisioning_class="check-capacity.autoscaling.x-k8s.io",
        ),
        AdmissionCheckSettings(
            name="atomic",
            provisioning_class="best-effort-atomic-scale-up.autoscaling.x-k8s.io",
            parameters=(("ValidUntilSeconds", "600"),),
            backoff=5,
            backoff_max=20,
            retry_limit=3,
        ),
    )
    atomic = k.admission_check("atomic")
    assert atomic is not None
    assert [atomic.delay(n) for n in (1, 2, 3, 4)] == [5, 10, 20, 20]
    assert k.admission_check("nope") is None
    assert [atomic.rejects(n) for n in (1, 2, 3, 4)] == [False, False, True, True]
    unlimited = k.admission_check("provisioning-request")
    assert unlimited is not None and unlimited.retry_limit is None
    assert not unlimited.rejects(1000)


def test_none_by_default(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text("backend: kubernetes\n")
    assert load_config(path, env={}).kubernetes.admission_checks == ()


CHECK = "{name: pr, controller: provisioning-request, provisioning_class: c.example.com"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("kubernetes: {admission_checks: {a: b}}", "kubernetes.admission_checks"),
        ("kubernetes: {admission_checks: [{name: pr}]}", "kubernetes.admission_checks[0]"),
        (
            "kubernetes: {admission_checks: [{name: pr, controller: x, provisioning_class: c}]}",
            "kubernetes.admission_checks[0].controller",
        ),
        (f"kubernetes: {{admission_checks: [{CHECK}, bogus: 1}}]}}", "bogus"),
        (
            f"kubernetes: {{admission_checks: [{CHECK}, backoff: 0}}]}}",
            "kubernetes.admission_checks[0].backoff",
        ),
        (
            f"kubernetes: {{admission_checks: [{CHECK}, retry_limit: 0}}]}}",
            "kubernetes.admission_checks[0].retry_limit",
        ),
        (
            f"kubernetes: {{admission_checks: [{CHECK}, retry_limit: 1.5}}]}}",
            "kubernetes.admission_checks[0].retry_limit",
        ),
        (
            f"kubernetes: {{admission_checks: [{CHECK}, parameters: [a]}}]}}",
            "kubernetes.admission_checks[0].parameters",
        ),
        (
            f"kubernetes: {{admission_checks: [{CHECK}}}, {CHECK}}}]}}",
            "kubernetes.admission_checks[1].name",
        ),
        (
            "kubernetes: {admission_checks: [{name: Bad_Name, controller: provisioning-request,"
            " provisioning_class: c}]}",
            "kubernetes.admission_checks[0].name",
        ),
    ],
    ids=[
        "mapping",
        "missing",
        "controller",
        "unknown",
        "backoff",
        "retry_limit",
        "retry_limit_int",
        "parameters",
        "twice",
        "name",
    ],
)
def test_bad_checks_are_named(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(path, env={})
