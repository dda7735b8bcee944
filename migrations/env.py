"""Alembic's entry point for queuemgr, configured by ``queuemgr.store.migrate``.

It runs online only (against a live connection): either one the caller put in
``config.attributes["connection"]``, or a fresh engine on ``sqlalchemy.url``.
The models' metadata is the target, so ``alembic revision --autogenerate``
(with ``QUEUEMGR_MIGRATIONS_DIR`` set) diffs against them.

Every run first takes a transaction-scoped advisory lock, so two replicas
upgrading at once serialize: the second waits, then finds the schema at head
(it reads ``alembic_version`` only once it holds the lock).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool, text
from sqlalchemy.engine import Connection

from queuemgr.store.leadership import MIGRATION_KEY, NAMESPACE
from queuemgr.store.models import Base

config = context.config
target_metadata = Base.metadata
MIGRATION_LOCK = text("SELECT pg_advisory_xact_lock(:ns, :key)").bindparams(
    ns=NAMESPACE, key=MIGRATION_KEY
)


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        transaction_per_migration=False,
        compare_server_default=True,
    )
    with context.begin_transaction():
        connection.execute(MIGRATION_LOCK)  # held until this transaction ends
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
