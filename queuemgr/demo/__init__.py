"""``queuemgr demo``: the real service on a simulated cluster, a seeded burst, and its figures.

Why it exists: the demo is not part of the service; it is a client of it. It
prepares its own database (:mod:`queuemgr.demo.demo_database`), runs the
composition root (:class:`~queuemgr.service.app.Service`) on the packaged
cluster file ``demo_cluster.yaml``, submits the burst of
:mod:`queuemgr.demo.burst` on time (:mod:`queuemgr.demo.run`) and reads what
happened back from the database (:mod:`queuemgr.demo.demo_figures`). Keeping
it out of ``queuemgr.service`` leaves the service holding only what
``queuemgr serve`` runs.

What must stay true: ``demo`` imports ``service`` and the layers below it,
never ``queuemgr.cli`` (which draws the view and imports ``demo``;
``.importlinter`` checks it); ``demo_cluster.yaml`` ships as package data
beside these modules (``pyproject.toml``) and its tenants and queue match
the burst.
"""
