"""Each outside system's client library is imported by its adapter alone.

``kubernetes`` only in ``queuemgr/k8s``; ``sqlalchemy`` and ``psycopg`` only in
``queuemgr/store`` (and ``migrations/``): the rest of the package holds the
store's ``Database``, passes the transactions it yields to the store's
functions and catches the store's errors. import-linter's forbidden contracts
(.importlinter) say the same for whole packages; this test checks every
module, and the lazy imports inside functions as well.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_core_is_pure import _imports

PACKAGE = Path(__file__).resolve().parents[2] / "queuemgr"
MODULES = sorted(PACKAGE.rglob("*.py"))


def _uses(path: Path, *roots: str) -> bool:
    return any(name.split(".")[0] in roots for name in _imports(path))


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_kubernetes_is_imported_only_by_the_k8s_adapter(path: Path) -> None:
    if _name(path).startswith("k8s/"):
        return
    assert not _uses(path, "kubernetes"), f"{_name(path)} imports kubernetes"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_sqlalchemy_and_psycopg_are_imported_only_by_the_store(path: Path) -> None:
    name = _name(path)
    if name.startswith("store/"):
        return
    assert not _uses(path, "sqlalchemy", "psycopg"), (
        f"{name} imports sqlalchemy or psycopg outside the store"
    )
