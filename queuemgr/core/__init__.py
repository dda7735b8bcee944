"""The pure scheduling core: no I/O, nothing outside the standard library.

Everything a cycle needs arrives in a :class:`Snapshot`; everything it decides
leaves in :class:`Decisions`. The simulator, the store and the service build
the one and apply the other.
"""

from queuemgr.core.cycle import schedule
from queuemgr.core.reasons import Decisions, PendingStatus
from queuemgr.core.snapshot import Config, Snapshot, build_snapshot
from queuemgr.core.verdicts import PendingReason

__all__ = [
    "Config",
    "Decisions",
    "PendingReason",
    "PendingStatus",
    "Snapshot",
    "build_snapshot",
    "schedule",
]
