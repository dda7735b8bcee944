"""How a user's value is quoted in an error message: recognisable, and bounded.

Why it exists: a message names the bad value, but the value may be anything a
file or a flag can hold, including a 10 MB string or a YAML alias bomb whose
full ``repr()`` would take gigabytes. ``shown`` builds its text from a bounded
walk (``reprlib``), so quoting a value costs about the same whatever its size.

What must stay true: the result is at most about ``LIMIT`` characters, built
without visiting more than a few elements of any container.
"""

from __future__ import annotations

import reprlib

LIMIT = 80

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxdict = 4
_REPR.maxstring = LIMIT
_REPR.maxother = LIMIT
_REPR.maxlong = 40


def shown(value: object) -> str:
    """A bounded ``repr`` of ``value`` for an error message."""
    text = _REPR.repr(value)
    return text if len(text) <= LIMIT + 10 else text[:LIMIT] + "..."
