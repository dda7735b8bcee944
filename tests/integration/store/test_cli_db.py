"""``queuemgr db upgrade|downgrade`` through click, against real databases."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from click.testing import CliRunner

from queuemgr.cli.main import main
from queuemgr.store.database import create_engine
from queuemgr.store.migrate import alembic_config

pytestmark = pytest.mark.integration


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()


def _head() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_upgrade_then_downgrade_a_fresh_database(empty_database_url: str) -> None:
    runner = CliRunner()
    up = runner.invoke(main, ["db", "upgrade"], env={"QUEUEMGR_DATABASE_URL": empty_database_url})
    assert up.exit_code == 0, up.output
    assert _revision(empty_database_url) == _head()
    down = runner.invoke(main, ["db", "downgrade", "base", "--url", empty_database_url])
    assert down.exit_code == 0, down.output
    assert _revision(empty_database_url) is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://nobody@127.0.0.1:1/none", "cannot connect to"),
        ("mysql://x@localhost/db", "needs Postgres"),
        ("not a url", "bad database URL"),
    ],
)
def test_a_bad_url_exits_1_without_a_traceback(url: str, expected: str) -> None:
    result = CliRunner().invoke(main, ["db", "upgrade", "--url", url])
    assert result.exit_code == 1
    assert expected in result.output
    assert ("Traceback" not in result.output and result.exception is None) or isinstance(
        result.exception, SystemExit
    )


def test_an_unknown_revision_exits_1(database_url: str) -> None:
    result = CliRunner().invoke(main, ["db", "upgrade", "zzzz", "--url", database_url])
    assert result.exit_code == 1 and "zzzz" in result.output
    assert "Traceback" not in result.output


def test_downgrade_needs_a_revision() -> None:
    result = CliRunner().invoke(main, ["db", "downgrade"])
    assert result.exit_code == 2


def test_a_command_on_a_database_without_the_schema_says_to_upgrade(
    empty_database_url: str,
) -> None:
    result = CliRunner().invoke(
        main, ["cq", "describe", "team-a"], env={"QUEUEMGR_DATABASE_URL": empty_database_url}
    )
    assert result.exit_code == 1, result.output
    assert "does not exist" in result.output and "queuemgr db upgrade" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "revision", ["0023", "0024"], ids=["a-table-missing", "a-column-missing"]
)
def test_a_command_on_an_older_schema_says_to_upgrade(
    empty_database_url: str, revision: str
) -> None:
    """A database last upgraded by an older queuemgr: the command that reads the newer
    table (``pending_classes``, 0024) or column (its ``reason``, 0025) says so, and works
    once upgraded."""
    env = {"QUEUEMGR_DATABASE_URL": empty_database_url}
    runner = CliRunner()
    assert runner.invoke(main, ["db", "upgrade", revision], env=env).exit_code == 0
    old = runner.invoke(main, ["list", "-A"], env=env)
    assert old.exit_code == 1, old.output
    assert "older queuemgr" in old.output and "queuemgr db upgrade" in old.output
    assert "Traceback" not in old.output
    assert runner.invoke(main, ["db", "upgrade"], env=env).exit_code == 0
    assert runner.invoke(main, ["list", "-A"], env=env).exit_code == 0
