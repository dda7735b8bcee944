"""The incremental cache hands out the same snapshot as building one from scratch."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuemgr.core.cache import Cache, CacheError
from queuemgr.core.cycle import schedule
from queuemgr.core.model import Workload
from queuemgr.core.node_topology import build_free_index
from queuemgr.core.resources import ResourceName
from queuemgr.core.snapshot import Config, Snapshot, build_snapshot
from tests.builders import make_workload as wl
from tests.builders import two_flavor_world


def _config() -> Config:
    return two_flavor_world().config()


def _nonzero(vec: Mapping[ResourceName, int]) -> dict[ResourceName, int]:
    return {r: v for r, v in vec.items() if v != 0}


def normalised(snap: Snapshot) -> dict[str, object]:
    usage = {
        cq: {f: _nonzero(v) for f, v in per.items() if _nonzero(v)}
        for cq, per in snap.usage.items()
    }
    return {
        "usage": {cq: per for cq, per in usage.items() if per},
        "free": {n: _nonzero(v) for n, v in snap.node_free.items()},
        "admitted": dict(snap.admitted),
        "pending": {cq: [w.id for w in ws] for cq, ws in snap.pending.items() if ws},
        "unroutable": [w.id for w in snap.unroutable],
        # Which nodes have how much free, grouped as placement reads it: each group sorted.
        "index": {
            c: {key: tuple(nodes) for key, nodes in groups.items()}
            for c, groups in (
                snap.node_index
                if snap.node_index is not None
                else build_free_index(snap.config.node_topology, snap.node_free)
            ).items()
        },
    }


def _random_workload(rng: random.Random, i: int) -> Workload:
    return (
        wl(f"w{i}")
        .ns(rng.choice(["x", "y", "z", "ghost"]))
        .gang(rng.randint(1, 3))
        .gpus(rng.choice([0, 1, 2, 4, 8]))
        .cpu(rng.choice(["500m", "1", "4"]))
        .priority(rng.randint(0, 2))
        .at(float(rng.randint(0, 5)))
        .build()
    )


@settings(deadline=None, max_examples=60)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 60))
def test_cache_snapshot_equals_build_snapshot(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    config = _config()
    cache = Cache(config)
    counter = 0
    handed_out: list[tuple[Snapshot, dict[str, object]]] = []
    for _ in range(steps):
        op = rng.choice(["add", "add", "admit", "remove_pending", "finish"])
        if op == "add":
            cache.add_pending(_random_workload(rng, counter))
            counter += 1
        elif op == "admit":
            decided = schedule(cache.snapshot(), 0.0).admitted
            for a in decided:
                if rng.random() < 0.7:
                    cache.admit(a)
        elif op == "remove_pending" and list(cache.pending()):
            cache.remove_pending(rng.choice(sorted(w.id for w in cache.pending())))
        elif op == "finish" and list(cache.admitted()):
            cache.remove_admitted(rng.choice(sorted(a.workload.id for a in cache.admitted())))
        if rng.random() < 0.5:
            continue  # several events between snapshots: the index is regrouped in a batch
        got = cache.snapshot()
        want = build_snapshot(config, admitted=cache.admitted(), pending=cache.pending())
        assert normalised(got) == normalised(want)
        handed_out.append((got, normalised(got)))
    # Every snapshot handed out is as it was, whatever the cache did since.
    for snapshot, then in handed_out:
        assert normalised(snapshot) == then
    assert schedule(cache.snapshot(), 1.0) == schedule(
        build_snapshot(config, admitted=cache.admitted(), pending=cache.pending()), 1.0
    )


def test_snapshot_handed_out_is_not_changed_later() -> None:
    cache = Cache(_config())
    cache.add_pending(wl("a").ns("x").gpus(8).cpu(1).build())
    before = cache.snapshot()
    frozen = normalised(before)
    (admission,) = schedule(before, 0.0).admitted
    cache.admit(admission)
    cache.add_pending(wl("b").ns("x").gpus(1).cpu(1).build())
    assert normalised(before) == frozen
    assert normalised(cache.snapshot()) != frozen


def test_set_config_rederives() -> None:
    cache = Cache(_config())
    cache.add_pending(wl("a").ns("x").gpus(8).cpu(1).build())
    (admission,) = schedule(cache.snapshot(), 0.0).admitted
    cache.admit(admission)
    cache.add_pending(wl("b").ns("z").gpus(1).cpu(1).build())
    config = _config()
    cache.set_config(config)
    want = build_snapshot(config, admitted=cache.admitted(), pending=cache.pending())
    assert normalised(cache.snapshot()) == normalised(want)


def test_cache_rejects_inconsistent_events() -> None:
    cache = Cache(_config())
    w = wl("a").ns("x").gpus(1).cpu(1).build()
    cache.add_pending(w)
    with pytest.raises(CacheError):
        cache.add_pending(w)
    with pytest.raises(CacheError):
        cache.remove_admitted(w.id)
    cache.remove_pending(w.id)
    with pytest.raises(CacheError):
        cache.remove_pending(w.id)
    assert not cache.is_pending(w.id)
