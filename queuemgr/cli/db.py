"""``queuemgr db upgrade|downgrade``: apply the Alembic migrations to the database.

Why it exists: upgrades are an operator's step (docs/operations.md); the
service never migrates on its own.

What must stay true: the database is the one every other command uses
(``QUEUEMGR_DATABASE_URL``, else the embedded Postgres), or ``--url``; errors
print one line on stderr and never a traceback: exit 2 for bad usage, 1 for a
failure (unreachable database, unknown revision, a failed migration).
"""

from __future__ import annotations

import sys

import click

from queuemgr.store.database import DatabaseError, resolve_url
from queuemgr.store.handle import Database
from queuemgr.store.migrate import MigrationError, downgrade, upgrade

EXIT_FAILURE = 1

_URL = click.option(
    "--url", envvar="QUEUEMGR_DATABASE_URL", help="Database URL (default: embedded Postgres)."
)


@click.group()
def db() -> None:
    """Database schema migrations."""


@db.command("upgrade")
@click.argument("revision", default="head")
@_URL
def upgrade_cmd(revision: str, url: str | None) -> None:
    """Migrate the database up to REVISION (default: head)."""
    _migrate(upgrade, url, revision)
    click.echo(f"database upgraded to {revision}", err=True)


@db.command("downgrade")
@click.argument("revision")
@_URL
def downgrade_cmd(revision: str, url: str | None) -> None:
    """Migrate the database down to REVISION ("base" removes every table)."""
    _migrate(downgrade, url, revision)
    click.echo(f"database downgraded to {revision}", err=True)


def _migrate(action: object, url: str | None, revision: str) -> None:
    try:
        resolved = resolve_url({"QUEUEMGR_DATABASE_URL": url} if url else None)
        db = Database.open(resolved)
        try:
            db.check()
        finally:
            db.dispose()
        action(resolved, revision)  # type: ignore[operator]
    except (DatabaseError, MigrationError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
    except Exception as exc:  # the last line of defence: report, never a traceback
        click.echo(f"error: migration failed: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_FAILURE)
