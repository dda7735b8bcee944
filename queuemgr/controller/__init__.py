"""The scheduler loop and the Kubernetes controller that ``queuemgr serve`` runs.

Why it exists: the service used to hold both the parts that run (the loop,
its ports, leader election, the LISTEN thread, the safety ticker, the ETA
tracker, the simulated and Kubernetes backends, the job sync, the pods-ready
check, the status write-back, the admission webhook and the configuration
sections they read) and the root that wires them together. This package is
the first half: each piece is built from plain settings and adapters handed
to it, so it can be tested and benchmarked without the composition root.

What must stay true: ``controller`` imports ``core``, ``spec`` and the
adapters (``store``, ``k8s``, ``metrics``, ``sim``) and never
``queuemgr.service``, ``queuemgr.demo`` or ``queuemgr.cli``
(``.importlinter`` checks it). Choosing which backend, which database and
which pieces run belongs to :mod:`queuemgr.service.app`, not here.
"""
