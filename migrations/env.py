"""Alembic's entry point for queuemgr, configured by ``queuemgr.store.migrate``.

It runs online only (against a live connection): either one the caller put in
``config.attributes["connection"]``, or a fresh engine on ``sqlalchemy.url``.
The models' metadata is the target, so ``alembic revision --autogenerate``
(with ``QUEUEMGR_MIGRATIONS_DIR`` set) diffs against them.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

from queuemgr.store.models import Base

config = context.config
target_metadata = Base.metadata


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        transaction_per_migration=False,
        compare_server_default=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        _migrate(given)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no sqlalchemy.url: use queuemgr.store.migrate to configure Alembic")
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            _migrate(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) migrations are not supported")
run()
