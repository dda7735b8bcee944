"""``--watch`` on list and status, and shell completion of workload and queue names."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from queuemgr.cli.main import main
from tests.integration.cli.conftest import Invoke, no_traceback

pytestmark = pytest.mark.integration


def _submit(cli: Invoke, name: str, ns: str = "team-b") -> None:
    r = cli("submit", "-q", "default", "-n", ns, "--gpus", "8", "--name", name, "--", "train")
    assert r.exit_code == 0, r.output


def _later(seconds: float, cli: Invoke, *args: str) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        assert cli(*args).exit_code == 0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_status_watch_prints_each_change_and_ends_when_the_workload_finishes(
    cli: Invoke, applied: Path
) -> None:
    _submit(cli, "job")
    cancel = _later(1.0, cli, "cancel", "job", "-n", "team-b")
    r = cli("status", "job", "-n", "team-b", "--watch", "--interval", "0.2", "-o", "json")
    cancel.join()
    assert r.exit_code == 0, r.output
    states = [json.loads(line)["state"] for line in r.output.splitlines()]
    assert states == ["Pending", "Finished"]  # printed once per change, not per poll


def test_list_watch_streams_json_lines_until_the_timeout(cli: Invoke, applied: Path) -> None:
    _submit(cli, "first")
    later = _later(0.8, cli, "submit", "-q", "default", "-n", "team-b", "--gpus", "1",
                   "--name", "second", "--", "x")  # fmt: skip
    started = time.monotonic()
    r = cli(
        "list", "-n", "team-b", "-w", "--interval", "0.2", "--watch-timeout", "2s", "-o", "json"
    )
    later.join()
    assert r.exit_code == 0, r.output
    assert time.monotonic() - started >= 2
    versions = [
        [w["name"] for w in json.loads(line)["workloads"]] for line in r.output.splitlines()
    ]
    assert versions == [["first"], ["first", "second"]]


def test_watch_table_and_bad_timeout(cli: Invoke, applied: Path) -> None:
    _submit(cli, "job")
    r = cli("list", "-n", "team-b", "--watch", "--watch-timeout", "0.5s", "--interval", "0.2")
    assert r.exit_code == 0 and r.output.startswith("# ") and "job" in r.output
    bad = cli("list", "--watch", "--watch-timeout", "soon")
    assert bad.exit_code == 2 and "--watch-timeout" in bad.output and "soon" in bad.output
    no_traceback(bad)


def _complete(database_url: str, words: str) -> list[str]:
    env = {
        "QUEUEMGR_DATABASE_URL": database_url,
        "_QUEUEMGR_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    r = CliRunner().invoke(main, [], env=env, prog_name="queuemgr")
    assert r.exit_code == 0, r.output
    return [line.split(",", 1)[1] for line in r.output.splitlines() if line]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        pytest.param("queuemgr wh", ["why"], id="command"),
        pytest.param("queuemgr why -n team-b jo", ["job-1", "job-2"], id="workload-by-prefix"),
        pytest.param("queuemgr cancel -n team-a jo", [], id="other-namespace-has-none"),
        pytest.param("queuemgr status -n team-b job-2", ["job-2"], id="status"),
        pytest.param("queuemgr list -n team-b -q de", ["default"], id="local-queue"),
    ],
)
def test_completion_of_commands_workloads_and_queues(
    cli: Invoke, applied: Path, database_url: str, words: str, expected: list[str]
) -> None:
    for name in ("job-1", "job-2", "other"):
        _submit(cli, name)
    assert _complete(database_url, words) == expected


def test_completion_scripts_and_a_database_that_is_not_there() -> None:
    runner = CliRunner()
    for shell in ("bash", "zsh", "fish"):
        r = runner.invoke(main, ["completion", shell])
        assert r.exit_code == 0 and "_QUEUEMGR_COMPLETE" in r.output
    bad = runner.invoke(main, ["completion", "tcsh"])
    assert bad.exit_code == 2 and "SHELL" in bad.output and "tcsh" in bad.output
    unreachable = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=1"
    assert _complete(unreachable, "queuemgr why jo") == []
