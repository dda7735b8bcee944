"""``flavor create/edit --toleration``: a bad value exits 2 naming the flag and the value,
before any database is opened (the URL here answers nothing)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from queuemgr.cli.main import main
from queuemgr.cli.objects import toleration_text
from queuemgr.core.model import TaintEffect, Toleration
from queuemgr.store import codec

NOWHERE = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1"


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env={"QUEUEMGR_DATABASE_URL": NOWHERE})
    assert "Traceback" not in result.output
    return result.exit_code, result.output


@pytest.mark.parametrize("verb", ["create", "edit"])
@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--toleration", "spot:"), "--toleration 'spot:': expected KEY=VALUE[:EFFECT]"),
        (("--toleration", "=true"), "--toleration '=true': KEY=VALUE needs a key"),
        (
            ("--toleration", "spot", "--toleration", "spot=true:Soon"),
            "--toleration 'spot=true:Soon': effect: expected one of NoSchedule",
        ),
    ],
    ids=["empty-effect", "no-key", "bad-effect"],
)
def test_a_bad_toleration_exits_2_before_the_database(
    verb: str, flags: tuple[str, ...], words: str
) -> None:
    code, output = _run("flavor", verb, "spot", *flags)
    assert code == 2, output
    assert words in output, output


def test_set_and_clear_cannot_be_combined() -> None:
    code, output = _run("flavor", "edit", "spot", "--toleration", "spot", "--clear-tolerations")
    assert code == 2, output
    assert "--toleration: cannot be combined with --clear-tolerations" in output


@pytest.mark.parametrize(
    ("toleration", "text"),
    [
        (
            Toleration(key="spot", value="true", effect=TaintEffect.NO_SCHEDULE),
            "spot=true:NoSchedule",
        ),
        (Toleration(key="spot", value=""), "spot="),
        (Toleration(key="spot", operator="Exists"), "spot"),
        (Toleration(operator="Exists", effect=TaintEffect.NO_EXECUTE), ":NoExecute"),
        (Toleration(operator="Exists"), "*"),
    ],
)
def test_describe_spells_a_toleration_as_the_flag_does(toleration: Toleration, text: str) -> None:
    (stored,) = codec.tolerations((toleration,))
    assert toleration_text(stored) == text
