"""``serve`` finds its database as every other command does (QUEUEMGR_DATA_DIR included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from queuemgr.service.app import Service
from queuemgr.service.settings import ServiceConfig
from queuemgr.store import database
from queuemgr.store.database import DatabaseError
from queuemgr.store.embedded import EmbeddedPostgresError


def test_without_a_url_the_embedded_server_is_the_one_in_queuemgr_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Path] = []

    def embedded_url(where: Path) -> str:
        asked.append(where)
        raise EmbeddedPostgresError("not started in this test")

    monkeypatch.delenv("QUEUEMGR_DATABASE_URL", raising=False)
    monkeypatch.setenv("QUEUEMGR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(database, "embedded_url", embedded_url)
    with pytest.raises(DatabaseError, match="embedded Postgres"):
        Service(ServiceConfig())
    assert asked == [tmp_path / "data"]
    # The same directory `queuemgr db upgrade` and the other commands use.
    assert database.data_dir() == tmp_path / "data"


def test_the_configured_url_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("QUEUEMGR_DATABASE_URL", "postgresql://from-env@127.0.0.1:1/x")
    with pytest.raises(DatabaseError, match=r"configured@127\.0\.0\.1:1"):
        Service(ServiceConfig(database_url="postgresql://configured@127.0.0.1:1/x"))
