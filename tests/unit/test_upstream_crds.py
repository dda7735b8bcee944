"""The upstream CRDs' Go module (tests/controlplane/crds) pins what the integration tests install.

No network and no ``go``: the module's ``go.mod`` requires exactly the modules
the CRD table of ``tests/integration/k8s/crds.py`` reads from, its ``go.sum``
holds both hashes of each at the pinned version (so a machine with a cold
module cache checks its download against the repository), and that module's
docstring names the versions pinned.
"""

from __future__ import annotations

import re

import pytest

from tests.integration.k8s import crds


def _required() -> dict[str, str]:
    text = (crds.GO_MODULE / "go.mod").read_text()
    block = re.search(r"^require \((.*?)^\)", text, re.S | re.M)
    lines = block.group(1).splitlines() if block else []
    lines += re.findall(r"^require (\S+ \S+)", text, re.M)
    pairs = (line.split("//")[0].split() for line in lines)
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def test_go_mod_requires_exactly_the_modules_the_crds_come_from() -> None:
    assert set(_required()) == {crd.module for crd in crds.ALL_CRDS}
    for module, version in _required().items():
        assert crds.module_version(module) == version


@pytest.mark.parametrize("module", sorted({crd.module for crd in crds.ALL_CRDS}))
def test_go_sum_holds_both_hashes_of_each_pinned_module(module: str) -> None:
    version = crds.module_version(module)
    sums = (crds.GO_MODULE / "go.sum").read_text().splitlines()
    for entry in (f"{module} {version}", f"{module} {version}/go.mod"):
        assert any(line.startswith(f"{entry} h1:") for line in sums), entry


@pytest.mark.parametrize("module", sorted({crd.module for crd in crds.ALL_CRDS}))
def test_the_docstring_names_the_pinned_versions(module: str) -> None:
    version = crds.module_version(module)
    assert f"``{module}`` {version}" in " ".join((crds.__doc__ or "").split())
