"""The core imports only the standard library and itself.

import-linter's contract forbids a list of known packages; this test closes
the gap for any package nobody thought to list.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "queuemgr" / "core"


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_module_imports_only_stdlib_and_core(path: Path) -> None:
    offenders = [
        name
        for name in _imports(path)
        if not (name == "queuemgr.core" or name.startswith("queuemgr.core."))
        and name.split(".")[0] not in sys.stdlib_module_names
        and name != "__future__"
    ]
    assert offenders == [], f"{path.name} imports {offenders}"


def test_the_check_sees_a_third_party_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import yaml\nfrom queuemgr.sim import engine\n")
    assert _imports(bad) == ["yaml", "queuemgr.sim"]
