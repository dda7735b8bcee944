"""The migrations create exactly the models, and round-trip down and up."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from queuemgr.store import migrate
from queuemgr.store.database import create_engine
from queuemgr.store.models import Base

pytestmark = pytest.mark.integration


def _diff(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_server_default": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_head_yields_exactly_the_models(database_url: str) -> None:
    assert _diff(database_url) == []


def test_downgrade_base_then_upgrade_head_round_trips(database_url: str) -> None:
    migrate.downgrade(database_url, "base")
    assert _tables(database_url) == {"alembic_version"}
    migrate.upgrade(database_url, "head")
    assert _diff(database_url) == []
    assert set(Base.metadata.tables) <= _tables(database_url)


def test_unknown_revision_is_a_clear_error(database_url: str) -> None:
    with pytest.raises(migrate.MigrationError, match="nope"):
        migrate.upgrade(database_url, "nope")
