"""Each outside system's client library is imported by its adapter alone.

``kubernetes`` only in ``queuemgr/k8s``; ``sqlalchemy`` and ``psycopg`` only in
``queuemgr/store`` (and ``migrations/``), apart from the modules listed in
``SQL_NOT_YET_BEHIND_THE_STORE``, which still open transactions of their own. That
list may only shrink: a module that no longer needs its place on it fails the test
too, so the list says exactly what is left to move. import-linter's forbidden
contracts (.importlinter) say the same for whole packages; this test checks
every module, and the lazy imports inside functions as well.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_core_is_pure import _imports

PACKAGE = Path(__file__).resolve().parents[2] / "queuemgr"
MODULES = sorted(PACKAGE.rglob("*.py"))

# Modules still driving SQLAlchemy themselves (engines, transactions, their types).
SQL_NOT_YET_BEHIND_THE_STORE = {
    "demo/demo_database.py",
}


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
    uses = _uses(path, "sqlalchemy", "psycopg")
    if name in SQL_NOT_YET_BEHIND_THE_STORE:
        assert uses, f"{name} no longer imports sqlalchemy: take it off the list"
    else:
        assert not uses, f"{name} imports sqlalchemy or psycopg outside the store"


def test_the_list_names_only_modules_that_exist() -> None:
    assert {_name(p) for p in MODULES} >= SQL_NOT_YET_BEHIND_THE_STORE
