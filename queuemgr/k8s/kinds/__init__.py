"""The job kinds queuemgr manages, one module each.

Why it exists: each kind keeps its pods, its ``suspend`` flag and its
terminal state in a different place; a module per kind says where, and
:class:`~queuemgr.k8s.jobframework.GenericJob` does the rest.
:mod:`queuemgr.k8s.jobs` registers them.

What must stay true: a kind module depends only on the job framework, the
manifest readers and (for a kind built of another's parts) its sibling; every
count is a whole number of pods, at least one.
"""

from queuemgr.k8s.kinds.batch import MIN_PARALLELISM, BatchJob
from queuemgr.k8s.kinds.jobset import JobSet
from queuemgr.k8s.kinds.pytorch import PyTorchJob
from queuemgr.k8s.kinds.raycluster import RayCluster
from queuemgr.k8s.kinds.rayjob import RayJob

__all__ = ["MIN_PARALLELISM", "BatchJob", "JobSet", "PyTorchJob", "RayCluster", "RayJob"]
