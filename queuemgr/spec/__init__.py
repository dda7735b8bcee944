"""The input language: what a person writes to queuemgr, checked before anything acts on it.

Queues, quotas and clusters (``scenario``, ``objects``), the scheduler's knobs and
durations (``knobs``), and the checks every YAML value and name goes through
(``checks``: bounded reads, names by Kubernetes' rules, each error naming the
path of the value). ``apply``, ``serve``'s configuration, the simulated backend
and ``simulate`` read the same files through it, so one file means one thing
everywhere.

What must stay true: it builds ``queuemgr.core`` values and decides nothing about
scheduling; it reads files only when handed a path, and imports no adapter
(store, k8s, metrics), the simulator, the controller, the service, the demo or
the CLI (``.importlinter``).
"""
