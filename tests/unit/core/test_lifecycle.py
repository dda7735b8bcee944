"""Workload states: the legal moves and nothing else."""

from __future__ import annotations

import itertools

import pytest

from queuemgr.core.lifecycle import (
    IllegalTransition,
    WorkloadState,
    WorkloadStatus,
    can_move,
    initial_status,
    transition,
)

S = WorkloadState
ALLOWED: set[tuple[WorkloadState, WorkloadState]] = {
    (S.PENDING, S.ADMITTED),
    (S.PENDING, S.INADMISSIBLE),
    (S.PENDING, S.FINISHED),
    (S.INADMISSIBLE, S.PENDING),
    (S.INADMISSIBLE, S.ADMITTED),  # a cycle admits it once a change made it fit
    (S.INADMISSIBLE, S.FINISHED),
    (S.ADMITTED, S.FINISHED),
    (S.ADMITTED, S.EVICTED),
    (S.EVICTED, S.PENDING),
    (S.EVICTED, S.FINISHED),
}
ILLEGAL = sorted(set(itertools.product(S, S)) - ALLOWED, key=lambda p: (p[0].value, p[1].value))


@pytest.mark.parametrize(
    ("src", "dst"),
    sorted(ALLOWED, key=lambda p: (p[0].value, p[1].value)),
    ids=lambda s: s.value,
)
def test_allowed_moves(src: WorkloadState, dst: WorkloadState) -> None:
    assert can_move(src, dst)
    after = transition(_at(src), dst, reason="Because", message="m", at=5.0)
    assert (after.state, after.reason, after.message, after.since) == (dst, "Because", "m", 5.0)


@pytest.mark.parametrize(("src", "dst"), ILLEGAL, ids=lambda s: s.value)
def test_illegal_moves_raise_naming_both_states(src: WorkloadState, dst: WorkloadState) -> None:
    assert not can_move(src, dst)
    with pytest.raises(IllegalTransition) as err:
        transition(_at(src), dst, reason="Nope", at=1.0)
    assert src.value in str(err.value)
    assert dst.value in str(err.value)


def test_initial_status_is_pending() -> None:
    status = initial_status(3.0)
    assert (status.state, status.reason, status.since) == (S.PENDING, "Created", 3.0)


def test_finished_is_terminal() -> None:
    assert not any(can_move(S.FINISHED, dst) for dst in S)


def _at(state: WorkloadState) -> WorkloadStatus:
    """A status in ``state``, reached from Pending through legal moves only."""
    path = {
        S.PENDING: [],
        S.ADMITTED: [S.ADMITTED],
        S.INADMISSIBLE: [S.INADMISSIBLE],
        S.EVICTED: [S.ADMITTED, S.EVICTED],
        S.FINISHED: [S.FINISHED],
    }[state]
    status = initial_status(0.0)
    for step in path:
        status = transition(status, step, reason="setup", at=0.0)
    return status
