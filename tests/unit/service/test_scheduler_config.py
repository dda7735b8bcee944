"""The service's ``scheduler:`` section takes the same knobs as a scenario's."""

from __future__ import annotations

from pathlib import Path

import pytest

from queuemgr.core.policy import SchedulerPolicy
from queuemgr.service.settings import ConfigError, load_config


@pytest.mark.parametrize(
    ("text", "largest"),
    [
        pytest.param("scheduler: {largest_reservations: 2, largest_min_gpus: 9}\n", 2, id="set"),
        pytest.param("scheduler: {reservation_depth: 4}\n", 0, id="default-none"),
    ],
)
def test_largest_reservations(tmp_path: Path, text: str, largest: int) -> None:
    path = tmp_path / "queuemgr.yaml"
    path.write_text(text)
    assert load_config(path, env={}).policy.largest_reservations == largest


def test_a_bad_value_is_refused_naming_the_knob(tmp_path: Path) -> None:
    path = tmp_path / "queuemgr.yaml"
    path.write_text("scheduler: {largest_reservations: -1}\n")
    with pytest.raises(ConfigError, match="largest_reservations"):
        load_config(path, env={})


@pytest.mark.parametrize(
    ("text", "base", "most"),
    [
        pytest.param("scheduler: {}\n", 60.0, 3600.0, id="defaults"),
        pytest.param(
            "scheduler: {requeue_backoff_base: 30s, requeue_backoff_max: 10m}\n",
            30.0,
            600.0,
            id="set",
        ),
        pytest.param("scheduler: {requeue_backoff_base: 0}\n", 0.0, 3600.0, id="off"),
    ],
)
def test_requeue_backoff_knobs(tmp_path: Path, text: str, base: float, most: float) -> None:
    path = tmp_path / "queuemgr.yaml"
    path.write_text(text)
    policy = load_config(path, env={}).policy
    assert (policy.requeue_backoff_base, policy.requeue_backoff_max) == (base, most)


def test_the_default_policy_is_the_simulators_default(tmp_path: Path) -> None:
    path = tmp_path / "queuemgr.yaml"
    path.write_text("scheduler: {}\n")
    assert load_config(path, env={}).policy == SchedulerPolicy()
    assert load_config(None, env={}).policy == SchedulerPolicy()


@pytest.mark.parametrize("value", ["30s", "5", "0.5"])
def test_a_victim_stop_delay_is_refused_naming_knob_and_value(tmp_path: Path, value: str) -> None:
    path = tmp_path / "queuemgr.yaml"
    path.write_text(f"scheduler: {{victim_stop_delay: {value}}}\n")
    with pytest.raises(ConfigError, match=rf"scheduler\.victim_stop_delay: .*must be 0.*{value}"):
        load_config(path, env={})


def test_a_zero_victim_stop_delay_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "queuemgr.yaml"
    path.write_text("scheduler: {victim_stop_delay: 0}\n")
    assert load_config(path, env={}).policy.victim_stop_delay == 0
