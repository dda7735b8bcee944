"""Postgres array parameters written as one array literal, not as a list of values.

Why it exists: the loop's statements pass whole columns as arrays (``unnest`` of
names, ids, flavors; ``= ANY`` of ids), tens of thousands of elements a second
under a sustained stream. psycopg adapts a Python list element by element in
Python (about 1 µs each, 5 % of a busy loop's time); joining the elements'
text in C costs a fraction of that, and the statement's ``CAST(:x AS type[])``
parses the literal on the server exactly as it would the adapted list.

What must stay true: ``CAST(literal(xs) AS t[])`` is the same array as ``xs``
for every list of strings, ints, floats, bools and None: a string is always
quoted with its backslashes and double quotes escaped (so commas, braces,
spaces, ``NULL`` and empty strings stay themselves), None is the unquoted
``NULL``, a float is written by ``repr`` (which round-trips exactly), and a
non-finite float or a string holding NUL is refused (no Postgres column holds
them). ``tests/integration/store/test_arrays.py`` checks the round trip on the
server.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"'})


def literal(values: Iterable[object]) -> str:
    """``values`` as a Postgres array literal, for a ``CAST(:param AS type[])``."""
    items = values if isinstance(values, list) else list(values)
    if not items:
        return "{}"
    first = items[0]
    # The loop's arrays are of one type each: a column. The quick paths cover those.
    if type(first) is int and all(type(v) is int for v in items):
        return "{" + ",".join(map(str, items)) + "}"
    if type(first) is str and all(type(v) is str for v in items):
        return '{"' + '","'.join(_text(str(v)) for v in items) + '"}'
    if type(first) is bool and all(type(v) is bool for v in items):
        return "{" + ",".join(["t" if v else "f" for v in items]) + "}"
    if type(first) is float and all(type(v) is float and math.isfinite(v) for v in items):
        return "{" + ",".join(map(repr, items)) + "}"
    return "{" + ",".join(map(_element, items)) + "}"


def _text(value: str) -> str:
    if "\0" in value:
        raise ValueError(f"array element {value!r}: Postgres text cannot hold NUL")
    return value.translate(_ESCAPES) if ("\\" in value or '"' in value) else value


def _element(value: object) -> str:
    if value is None:
        return "NULL"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"array element {value!r}: not a finite number")
        return repr(value)
    if isinstance(value, str):
        return '"' + _text(value) + '"'
    raise TypeError(f"array element {value!r}: {type(value).__name__} is not an array element")
