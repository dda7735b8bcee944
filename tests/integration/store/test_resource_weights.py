"""A ClusterQueue's resource weights round-trip exactly, are audited, and reach the mirror."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.core.model import ClusterQueueName, FlavorName, FlavorQuota, ResourceFlavor
from queuemgr.core.resources import ResourceName
from queuemgr.core.weights import ResourceWeight
from queuemgr.store.config_objects import load_config, upsert_cluster_queue, upsert_flavor
from queuemgr.store.handle import Database
from queuemgr.store.mirror import StateMirror
from queuemgr.store.repository import load_state
from tests.integration.store.helpers import CQ, GPU, seed_config

pytestmark = pytest.mark.integration

MIG = ResourceName("nvidia.com/mig-1g.10gb")
SHARED = ResourceName("nvidia.com/gpu.shared")
MIG_FLAVOR = ResourceFlavor(name=FlavorName("h100-mig"), node_labels={"gpu": "h100-mig"})
WEIGHTS = (
    ResourceWeight(resource=MIG, numerator=1, denominator=7),
    ResourceWeight(resource=SHARED, numerator=1, denominator=4, counts_as=GPU),
)
WEIGHTED = dataclasses.replace(
    CQ,
    flavors=(*CQ.flavors, FlavorQuota(flavor=MIG_FLAVOR.name, nominal={MIG: 14, SHARED: 0})),
    resource_weights=WEIGHTS,
)


def _last_audit(engine: Engine) -> sa.Row[tuple[object, ...]]:
    with engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT action, object_name, before, after FROM audit_log ORDER BY id DESC")
        ).first()  # type: ignore[return-value]


def test_weights_round_trip_as_integers_and_are_audited(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        upsert_flavor(conn, MIG_FLAVOR, actor="test")
        assert upsert_cluster_queue(conn, WEIGHTED, actor="os:bob")
        assert not upsert_cluster_queue(conn, WEIGHTED, actor="os:bob")  # no change, no row
    with engine.connect() as conn:
        loaded = load_config(conn)[0].cluster_queues[CQ.name]
        kinds = conn.execute(
            sa.text(
                "SELECT jsonb_typeof(w -> 'numerator'), jsonb_typeof(w -> 'denominator') "
                "FROM cluster_queues, jsonb_array_elements(resource_weights) AS w"
            )
        ).all()
    assert loaded == WEIGHTED
    assert loaded.resource_weights == WEIGHTS  # in order, N and D as given
    assert [tuple(k) for k in kinds] == [("number", "number")] * 2
    last = _last_audit(engine)
    assert (last.action, last.object_name) == ("update", "team-a")
    assert last.before["resource_weights"] == []  # type: ignore[index]
    assert last.after["resource_weights"] == [  # type: ignore[index]
        {"resource": MIG, "numerator": 1, "denominator": 7, "counts_as": GPU},
        {"resource": SHARED, "numerator": 1, "denominator": 4, "counts_as": GPU},
    ]
    cleared = dataclasses.replace(WEIGHTED, resource_weights=())
    with engine.begin() as conn:
        assert upsert_cluster_queue(conn, cleared, actor="os:bob")
    with engine.connect() as conn:
        assert load_config(conn)[0].cluster_queues[CQ.name].resource_weights == ()
    assert _last_audit(engine).after["resource_weights"] == []  # type: ignore[index]


def test_a_queue_written_without_the_column_has_no_weights(engine: Engine) -> None:
    """The server default: a row from before migration 0017 (or any writer that leaves
    the column out) reads as no weights, the behaviour before the column existed."""
    seed_config(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO cluster_queues (name) VALUES ('bare')"))
    with engine.connect() as conn:
        bare = load_config(conn)[0].cluster_queues[ClusterQueueName("bare")]
    assert bare.resource_weights == ()


def test_the_mirror_sees_a_change_of_weights(engine: Engine) -> None:
    """The leader's mirror reloads the config when only the weights change."""
    seed_config(engine)
    with engine.begin() as conn:
        upsert_flavor(conn, MIG_FLAVOR, actor="test")
    mirror = StateMirror()
    assert mirror.refresh(Database(engine)).config.cluster_queues[CQ.name].resource_weights == ()
    with engine.begin() as conn:
        upsert_cluster_queue(conn, WEIGHTED, actor="test")
    state = mirror.refresh(Database(engine))
    assert state.config.cluster_queues[CQ.name].resource_weights == WEIGHTS
    assert state.config.cluster_queues == load_state(Database(engine)).config.cluster_queues
    topology = state.config.quota_topology
    assert CQ.name in topology.folds
