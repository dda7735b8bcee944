"""A flavor's tolerations survive the store exactly, are audited, and reach the mirror."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from queuemgr.core.model import FlavorName, TaintEffect, Toleration
from queuemgr.store import admin, job_rows
from queuemgr.store.config_objects import load_config, upsert_flavor
from queuemgr.store.handle import Database
from queuemgr.store.mirror import StateMirror
from queuemgr.store.repository import load_state
from tests.integration.store.helpers import H100, seed_config

pytestmark = pytest.mark.integration

TOLERATIONS = (
    Toleration(key="gpu", value="h100", effect=TaintEffect.NO_SCHEDULE),
    Toleration(key="nvidia.com/gpu", operator="Exists"),  # every effect
    Toleration(operator="Exists", effect=TaintEffect.NO_EXECUTE),  # every key
)
TOLERANT = dataclasses.replace(H100, tolerations=TOLERATIONS)
AS_STORED = [
    {"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "value": "", "effect": None},
    {"key": "", "operator": "Exists", "value": "", "effect": "NoExecute"},
]


def _last_audit(engine: Engine) -> sa.Row[tuple[object, ...]]:
    with engine.connect() as conn:
        return conn.execute(
            sa.text(
                "SELECT action, object_kind, object_name, actor, before, after"
                " FROM audit_log ORDER BY id DESC"
            )
        ).first()  # type: ignore[return-value]


def test_tolerations_round_trip_in_order_and_are_audited(engine: Engine) -> None:
    seed_config(engine)
    with engine.begin() as conn:
        assert upsert_flavor(conn, TOLERANT, actor="os:bob")
        assert not upsert_flavor(conn, TOLERANT, actor="os:bob")  # no change, no row
    with engine.connect() as conn:
        loaded = load_config(conn)[0].flavors[H100.name]
        stored = conn.execute(sa.text("SELECT tolerations FROM flavors")).scalar_one()
        # the controller's lookup (kube_controller -> Placement.of) reads the same
        assert job_rows.flavor(conn, "h100") == TOLERANT
    assert loaded == TOLERANT
    assert loaded.tolerations == TOLERATIONS
    assert stored == AS_STORED
    last = _last_audit(engine)
    assert tuple(last[:4]) == ("update", "ResourceFlavor", "h100", "os:bob")
    assert last.before["tolerations"] == []  # type: ignore[index]
    assert last.after["tolerations"] == AS_STORED  # type: ignore[index]
    assert last.after["taints"] == last.before["taints"]  # type: ignore[index]

    with engine.begin() as conn:
        assert upsert_flavor(conn, H100, actor="os:bob")  # cleared
    with engine.connect() as conn:
        assert load_config(conn)[0].flavors[H100.name].tolerations == ()
    assert _last_audit(engine).after["tolerations"] == []  # type: ignore[index]


def test_a_deleted_flavors_audit_row_keeps_its_tolerations(engine: Engine) -> None:
    spot = dataclasses.replace(TOLERANT, name=FlavorName("spot"), node_labels={"pool": "spot"})
    with engine.begin() as conn:
        upsert_flavor(conn, spot, actor="test")
        assert admin.delete_flavor(conn, "spot", actor="os:bob")
    last = _last_audit(engine)
    assert (last.action, last.object_name, last.after) == ("delete", "spot", None)
    assert last.before["tolerations"] == AS_STORED  # type: ignore[index]


def test_a_flavor_written_without_the_column_tolerates_nothing(engine: Engine) -> None:
    """The server default: a row from before migration 0019 (or any writer that leaves
    the column out) reads as no tolerations, the behaviour before the column existed."""
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO flavors (name) VALUES ('bare')"))
    with engine.connect() as conn:
        assert load_config(conn)[0].flavors[FlavorName("bare")].tolerations == ()


def test_the_mirror_sees_a_change_of_tolerations(engine: Engine) -> None:
    """The leader's mirror reloads the config when only a flavor's tolerations change,
    and node fit then counts them."""
    seed_config(engine)  # nodes tainted gpu=h100:NoSchedule, as the flavor is
    mirror = StateMirror()
    before = mirror.refresh(Database(engine)).config
    assert before.flavors[H100.name].tolerations == ()
    with engine.begin() as conn:
        upsert_flavor(conn, TOLERANT, actor="test")
    state = mirror.refresh(Database(engine))
    assert state.config.flavors[H100.name].tolerations == TOLERATIONS
    assert state.config.flavors == load_state(Database(engine)).config.flavors
    assert state.config.node_topology.tolerations[H100.name] == TOLERATIONS
