"""Gang shape ids: equal shapes share one id, in whichever process they are met."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from queuemgr.core import shapes
from tests.builders import make_workload


def test_equal_shapes_share_an_id_and_others_do_not() -> None:
    one = make_workload("one").ns("a").gpus(1).build()
    other_one = make_workload("two").ns("b").gpus(1).at(5.0).build()
    gang = make_workload("gang").ns("a").gang(2).gpus(8).build()
    assert one.shape == other_one.shape
    assert one.shape != gang.shape


def test_a_saved_workload_keeps_its_shape_in_a_process_that_met_other_shapes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A simulator checkpoint holds workloads and per-shape memos made in one process;
    # the process that loads it numbers shapes in its own order. A workload rebuilt
    # there (an eviction replaces it) must get the id its saved twin has.
    one = make_workload("one").ns("a").gpus(1).build()
    gang = make_workload("gang").ns("a").gang(2).gpus(8).build()
    saved = pickle.dumps((one, gang))
    monkeypatch.setattr(shapes, "_SHAPE_IDS", {})  # what a new process starts with
    monkeypatch.setattr(shapes, "_SHAPES", {}, raising=False)
    for gpus in (3, 5):
        make_workload(f"met-first-{gpus}").ns("z").gang(3).gpus(gpus).build()
    one, gang = pickle.loads(saved)
    rebuilt = dataclasses.replace(gang, evictions=1)
    assert rebuilt.shape == gang.shape
    assert dataclasses.replace(one, evictions=1).shape == one.shape != rebuilt.shape
