"""Alembic, configured in code: no ``alembic.ini`` to keep in step with the package.

Why it exists: ``queuemgr db upgrade`` and the test fixtures migrate a
database the same way, from the scripts in the repository's top-level
``migrations/`` directory.

Where the scripts are found, first match wins:

1. ``QUEUEMGR_MIGRATIONS_DIR``, when set;
2. ``migrations/`` next to the ``queuemgr`` package, i.e. the top of a source
   checkout, which is what an editable install (``pip install -e .``) runs from.

What must stay true: the migrations create exactly ``queuemgr.store.models``'s
metadata (a test compares them); a migration runs in one transaction
(Postgres has transactional DDL), so a failed upgrade leaves the old schema.
"""

from __future__ import annotations

import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy.engine import Connection

from queuemgr.store.database import DatabaseError, normalize_url

MIGRATIONS_ENV = "QUEUEMGR_MIGRATIONS_DIR"


class MigrationError(RuntimeError):
    """A migration could not be found or applied; the message is for the user."""


def migrations_dir() -> Path:
    override = os.environ.get(MIGRATIONS_ENV)
    candidate = Path(override) if override else Path(__file__).resolve().parents[2] / "migrations"
    if not (candidate / "env.py").is_file():
        raise MigrationError(
            f"no Alembic migrations at {candidate}: run from a source checkout "
            f"(pip install -e .) or set {MIGRATIONS_ENV}"
        )
    return candidate


def alembic_config(url: str | None = None, connection: Connection | None = None) -> Config:
    """A Config for ``url`` or, when given, an already open ``connection`` (tests use one)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if url is not None:
        # ConfigParser interpolates "%": escape it, URLs may carry %-encoded passwords.
        cfg.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    _run(command.upgrade, url, revision)


def downgrade(url: str, revision: str) -> None:
    _run(command.downgrade, url, revision)


def _run(action: object, url: str, revision: str) -> None:
    try:
        cfg = alembic_config(url)
        action(cfg, revision)  # type: ignore[operator]
    except (DatabaseError, MigrationError):
        raise
    except CommandError as exc:
        raise MigrationError(str(exc)) from None
