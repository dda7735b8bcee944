"""Shared pytest configuration: Hypothesis profiles.

The ``ci`` profile is loaded when the ``CI`` environment variable is set and is
derandomized so CI runs are reproducible; otherwise the ``dev`` profile is used.
"""

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
