"""A flavor's autoscale (migration 0022) survives the store exactly, is audited, and
reaches the mirror, whose config then has the virtual nodes."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.core.model import FlavorAutoscale, FlavorName, NodeTemplate
from queuemgr.store import job_rows
from queuemgr.store.config_objects import load_config, upsert_flavor
from queuemgr.store.handle import Database
from queuemgr.store.mirror import StateMirror
from tests.integration.store.helpers import CPU, GPU, H100, seed_config

pytestmark = pytest.mark.integration

AUTOSCALE = FlavorAutoscale(
    max_nodes=5,
    node=NodeTemplate(allocatable={GPU: 8, CPU: 96_000}, labels={"zone": "a"}),
)
SCALED = dataclasses.replace(H100, autoscale=AUTOSCALE)
AS_STORED = {
    "max_nodes": 5,
    "node": {"allocatable": {"nvidia.com/gpu": 8, "cpu": 96_000}, "labels": {"zone": "a"}},
}


def test_autoscale_round_trips_and_is_audited(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        assert upsert_flavor(conn, SCALED, actor="os:bob")
        assert not upsert_flavor(conn, SCALED, actor="os:bob")  # no change, no row
    with engine.connect() as conn:
        loaded = load_config(conn)[0].flavors[H100.name]
        stored = conn.execute(sa.text("SELECT autoscale FROM flavors")).scalar_one()
        assert job_rows.flavor(conn, "h100") == SCALED
        last = conn.execute(sa.text("SELECT before, after FROM audit_log ORDER BY id DESC")).first()
    assert loaded == SCALED
    assert stored == AS_STORED
    assert last is not None
    assert last.before["autoscale"] is None
    assert last.after["autoscale"] == AS_STORED
    with engine.begin() as conn:
        assert upsert_flavor(conn, H100, actor="os:bob")  # cleared
    with engine.connect() as conn:
        assert load_config(conn)[0].flavors[H100.name].autoscale is None
        assert conn.execute(sa.text("SELECT autoscale IS NULL FROM flavors")).scalar_one()


def test_a_flavor_written_without_the_column_has_no_autoscale(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO flavors (name) VALUES ('bare')"))
    with engine.connect() as conn:
        assert load_config(conn)[0].flavors[FlavorName("bare")].autoscale is None


def test_the_mirror_sees_a_change_of_autoscale(engine: Engine) -> None:
    seed_config(engine)  # two h100 nodes
    mirror = StateMirror()
    assert mirror.refresh(Database(engine)).config.virtual_nodes == {}
    with engine.begin() as conn:
        upsert_flavor(conn, SCALED, actor="test")
    config = mirror.refresh(Database(engine)).config
    assert config.flavors[H100.name].autoscale == AUTOSCALE
    assert sorted(config.virtual_nodes) == ["h100~1", "h100~2", "h100~3"]  # 5 - 2
