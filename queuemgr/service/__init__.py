"""The ``queuemgr serve`` admission service: the composition root around the pure core.

Layering: ``service`` imports ``core``, ``store``, ``metrics`` and ``sim`` (for
parsing cluster files and scheduler knobs); only ``cli`` imports ``service``.
:mod:`queuemgr.service.app` is the one place that picks concrete adapters.
"""
