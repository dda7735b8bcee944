"""The status board's rank keys sort as the ranks they stand for, and read back as them.

Positions are counted in Postgres over these bytes (``store.status_board``), so
a key that sorted differently from the leader's order would give ``why`` a
wrong position while the rows themselves looked right.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queuemgr.core.standings import RowRank
from queuemgr.store.status_board import rank_key, rank_of

_PRIORITY = st.integers(min_value=-(2**31), max_value=2**31)
_TIME = st.floats(allow_nan=False, allow_infinity=False, width=64)
_ID = st.text(st.characters(exclude_characters="\0", codec="utf-8"), max_size=12)
_ORDER_KEY = st.tuples(_PRIORITY, _TIME, _ID)


@given(st.lists(_ORDER_KEY, min_size=2, max_size=30))
def test_queue_order_keys_sort_as_the_queue_does(keys: list[tuple[int, float, str]]) -> None:
    # -0.0 and 0.0 are one time: the key must not split them.
    keys = [(p, t + 0.0, i) for p, t, i in keys]
    assert sorted(keys, key=rank_key) == sorted(keys)


@given(st.lists(st.integers(min_value=0, max_value=2**40), min_size=2, max_size=30))
def test_positions_sort_as_numbers(positions: list[int]) -> None:
    assert sorted(positions, key=rank_key) == sorted(positions)


@given(st.one_of(_ORDER_KEY, st.integers(min_value=0, max_value=2**63)))
def test_a_key_reads_back_as_its_rank(rank: RowRank) -> None:
    if isinstance(rank, tuple):
        rank = (rank[0], rank[1] + 0.0, rank[2])
    assert rank_of(rank_key(rank)) == rank


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param((-5, 10.0, "x/a"), (-5, 10.0, "x/ab"), id="a-prefix-sorts-first"),
        pytest.param((-5, -1.0, "z"), (-5, 0.0, "a"), id="negative-time-before-zero"),
        pytest.param((-(2**70), 0.0, "a"), (-(2**63), 0.0, "b"), id="beyond-64-bits-ties-by-id"),
        pytest.param((-0, -0.0, "a"), (0, 0.0, "b"), id="minus-zero-is-zero"),
    ],
)
def test_edges(a: tuple[int, float, str], b: tuple[int, float, str]) -> None:
    assert rank_key(a) < rank_key(b)
