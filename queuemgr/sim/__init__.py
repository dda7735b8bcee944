"""The discrete-event simulator behind ``queuemgr simulate``.

It builds core objects from a scenario (read by ``queuemgr.spec.scenario``, the
input language every command shares) and a trace (``trace``),
replays them through ``queuemgr.core``'s scheduler in virtual time
(``engine``), checks the result independently (``invariants``) and reports it
(``report``). It must never hold scheduling logic of its own, and the core
must never import it.
"""
