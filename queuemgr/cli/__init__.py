"""Command-line interface for queuemgr (the ``queuemgr`` console script)."""
