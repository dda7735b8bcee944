"""The Postgres system of record: schema, migrations, embedded server and repositories.

Layering: ``store`` imports ``core`` and third-party database packages, never
``sim``, ``k8s``, ``metrics``, ``controller``, ``service`` or ``demo``
(``.importlinter`` checks it).
Entry points: :func:`queuemgr.store.database.resolve_url` picks the database,
:class:`queuemgr.store.handle.Database` is the handle every caller holds (its
transactions yield what the store's functions take; :mod:`queuemgr.store.errors`
is what they raise instead of the driver's exceptions),
:mod:`queuemgr.store.migrate` migrates it, :mod:`queuemgr.store.config_objects` and
:mod:`queuemgr.store.workloads`, :mod:`queuemgr.store.decisions` and
:mod:`queuemgr.store.transitions` write to it, and
:func:`queuemgr.store.repository.load_state` reads one cycle's inputs.
"""
