"""The service's ``scheduler:`` section takes the same knobs as a scenario's."""

from __future__ import annotations

from pathlib import Path

import pytest

from queuemgr.service.config import ConfigError, load_config


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
