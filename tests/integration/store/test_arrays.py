"""An array literal is, on the server, the very array of the values it was made from.

The loop's statements take their columns as ``store.arrays.literal`` strings cast
to arrays; a value that the literal's syntax could misread (a comma, a brace, a
quote, a backslash, the word NULL, an empty string) must come back unchanged, or
a workload row would be matched under another name.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, Engine, text

from queuemgr.store.arrays import literal

pytestmark = pytest.mark.integration

# Postgres text holds any character but NUL; surrogates cannot be encoded at all.
TEXT = st.text(st.characters(exclude_characters="\0", exclude_categories=("Cs",)), max_size=12)
BIGINT = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOAT = st.floats(allow_nan=False, allow_infinity=False)
CASES = {
    "text": (st.lists(st.one_of(st.none(), TEXT), max_size=8), "text[]"),
    "bigint": (st.lists(st.one_of(st.none(), BIGINT), max_size=8), "bigint[]"),
    "float8": (st.lists(st.one_of(st.none(), FLOAT), max_size=8), "float8[]"),
    "boolean": (st.lists(st.one_of(st.none(), st.booleans()), max_size=8), "boolean[]"),
}
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def conn(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn:
        yield conn


def _round_trip(conn: Connection, values: list[object], pg_type: str) -> list[object]:
    got = conn.execute(text(f"SELECT CAST(:x AS {pg_type})"), {"x": literal(values)})
    return list(got.scalar_one())


@pytest.mark.parametrize("case", sorted(CASES), ids=sorted(CASES))
@SETTINGS
@given(data=st.data())
def test_the_server_reads_back_the_values(conn: Connection, case: str, data: st.DataObject) -> None:
    strategy, pg_type = CASES[case]
    values = data.draw(strategy)
    got = _round_trip(conn, values, pg_type)
    assert got == values
    # -0.0 == 0.0; the sign must survive too, as a timestamp's epoch would.
    for a, b in zip(got, values, strict=True):
        if isinstance(b, float):
            assert math.copysign(1.0, a) == math.copysign(1.0, b)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "values",
    [
        ["NULL", "null", "", " ", "a,b", "{x}", 'say "hi"', "back\\slash", "trailing\\"],
        ["tab\there", "new\nline", "ünïcødé", "🙂"],
    ],
    ids=["syntax-words", "whitespace-and-unicode"],
)
def test_strings_the_syntax_could_misread_stay_themselves(
    conn: Connection, values: list[object]
) -> None:
    assert _round_trip(conn, values, "text[]") == values


@pytest.mark.parametrize(
    ("values", "error", "match"),
    [
        (["a\0b"], ValueError, "NUL"),
        ([1.0, math.inf], ValueError, "finite"),
        ([1.0, math.nan], ValueError, "finite"),
        ([object()], TypeError, "not an array element"),
    ],
    ids=["nul", "infinity", "nan", "object"],
)
def test_what_no_column_holds_is_refused(values: list[object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        literal(values)
