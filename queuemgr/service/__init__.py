"""The ``queuemgr serve`` admission service: the composition root around the pure core.

Layering: ``service`` imports ``controller`` (the loop, its backends, the
Kubernetes controller and the webhook), ``core``, ``store``, ``metrics`` and
``sim``; only ``demo`` and ``cli`` import ``service``. It holds nothing but
the wiring: the configuration file (:mod:`queuemgr.service.settings`), the
health and metrics endpoint (:mod:`queuemgr.service.http`) and
:mod:`queuemgr.service.app`, the one place that picks concrete adapters.
"""
