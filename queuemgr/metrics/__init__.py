"""The Prometheus exporter: :class:`SchedulerMetrics` and :func:`serve`.

An adapter beside ``store``, ``k8s`` and ``sim``: it reads core objects and
imports nothing but ``queuemgr.core`` and ``prometheus_client``. The metric
names, labels and units are listed in ``docs/observability.md``.
"""

from queuemgr.metrics.exporter import SchedulerMetrics, label_values, serve
from queuemgr.metrics.shape import EVICTION_REASONS, FINISH_RESULTS, PREEMPTION_REASONS

__all__ = [
    "EVICTION_REASONS",
    "FINISH_RESULTS",
    "PREEMPTION_REASONS",
    "SchedulerMetrics",
    "label_values",
    "serve",
]
