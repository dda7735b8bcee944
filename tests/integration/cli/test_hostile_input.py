"""Hostile input to every command: quotes and SQL, unicode, control characters, 10 kB.

Each value is passed where a name, a namespace or a selector goes. Whatever
the command decides (accept it as data, refuse it as bad input, or not find
it), it must exit 0, 1 or 2 with a message and no traceback, and the store
must come out whole: the same tables, the same rows as before, except what
an accepted write added.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from tests.integration.cli.conftest import Invoke, no_traceback

pytestmark = pytest.mark.integration

HOSTILE = {
    "sql": "x'; DROP TABLE workloads; --",
    "quotes": "\"'`$(id)`",
    "unicode": "équipe-😀-名前",
    "control": "a\nb\tc\x1b[31m",
    "nul": "a\x00b",
    "long": "z" * 10_000,
    "percent": "%s%(x)s%%",
}

# Every command, with H where the hostile value goes.
COMMANDS = {
    "cq-describe": ("cq", "describe", "H"),
    "cq-create": ("cq", "create", "H", "--nominal", "h100:nvidia.com/gpu=8"),
    "cq-edit": ("cq", "edit", "H", "--weight", "2"),
    "cq-delete": ("cq", "delete", "H"),
    "cq-stop": ("cq", "stop", "H"),
    "cq-resume": ("cq", "resume", "H"),
    "cq-list-cohort": ("cq", "list", "--cohort", "H"),
    "lq-create": ("lq", "create", "H", "-n", "team-a", "--cluster-queue", "team-a"),
    "lq-create-ns": ("lq", "create", "default", "-n", "H", "--cluster-queue", "team-a"),
    "lq-describe": ("lq", "describe", "H", "-n", "team-a"),
    "lq-delete": ("lq", "delete", "H", "-n", "team-a"),
    "cohort-create": ("cohort", "create", "H"),
    "cohort-describe": ("cohort", "describe", "H"),
    "cohort-delete": ("cohort", "delete", "H"),
    "flavor-create": ("flavor", "create", "H", "--label", "gpu=h100"),
    "flavor-label": ("flavor", "create", "b200", "--label", "gpu=H"),
    "flavor-describe": ("flavor", "describe", "H"),
    "flavor-delete": ("flavor", "delete", "H"),
    "quota-set-cq": ("quota", "set", "H", "--flavor", "h100", "nvidia.com/gpu=8"),
    "quota-set-flavor": ("quota", "set", "team-a", "--flavor", "H", "nvidia.com/gpu=8"),
    "quota-set-resource": ("quota", "set", "team-a", "--flavor", "h100", "H=8"),
    "queues": ("queues", "-n", "H"),
    "usage-since": ("usage", "--since", "H"),
    "audit-object": ("audit", "--object", "cq/H"),
    "audit-since": ("audit", "--since", "H"),
    "submit-name": ("submit", "-q", "default", "-n", "team-b", "--name", "H", "--", "x"),
    "submit-queue": ("submit", "-q", "H", "-n", "team-b", "--", "x"),
    "submit-namespace": ("submit", "-q", "default", "-n", "H", "--", "x"),
    "submit-command": ("submit", "-q", "default", "-n", "team-b", "--", "H"),
    "list-ns": ("list", "-n", "H"),
    "list-queue": ("list", "-n", "team-b", "-q", "H"),
    "status": ("status", "H", "-n", "team-b"),
    "why": ("why", "H", "-n", "team-b"),
    "cancel": ("cancel", "H", "-n", "team-b"),
}


def _tables(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        names = sa.inspect(conn).get_table_names()
        return {
            t: int(conn.execute(sa.text(f'SELECT count(*) FROM "{t}"')).scalar_one()) for t in names
        }


@pytest.mark.parametrize("command", list(COMMANDS.values()), ids=list(COMMANDS))
def test_hostile_input_is_data_or_a_clear_error(
    cli: Invoke, applied: Path, engine: Engine, command: tuple[str, ...]
) -> None:
    for kind, value in HOSTILE.items():
        before = _tables(engine)
        r = cli(*(value if a == "H" else a.replace("H=", f"{value}=") for a in command))
        no_traceback(r)
        assert r.exit_code in (0, 1, 2), (kind, r.output[:500])
        if r.exit_code:
            assert r.output.startswith(("error", "Usage", "Error")), (kind, r.output[:300])
            assert len(r.output) < 2_000, (kind, r.output[:300])  # the value shown bounded
        after = _tables(engine)
        assert after.keys() == before.keys(), kind  # nothing dropped
        if r.exit_code != 0:  # a refused or failed command wrote nothing at all
            assert after == before, kind


# Names Kubernetes would refuse, and the field each create command names in its error.
BAD_NAMES = {
    "upper-underscore": "Team_A",
    "long": "a" * 300,  # past both the 63 of a label and the 253 of a subdomain
    "space": "team a",
    "newline": "team-a\nteam-b",
    "ansi": "\x1b[31mteam",
    "ten-megabytes": "z" * 10_000_000,
}
CREATES = {
    "cq-create": (("cq", "create", "H", "--nominal", "h100:nvidia.com/gpu=8"), "NAME"),
    "cq-cohort": (("cq", "create", "x", "--cohort", "H", "--nominal", "h100:cpu=1"), "--cohort"),
    "lq-create": (("lq", "create", "H", "-n", "team-a", "--cluster-queue", "team-a"), "NAME"),
    "lq-namespace": (("lq", "create", "x", "-n", "H", "--cluster-queue", "team-a"), "--namespace"),
    "cohort-create": (("cohort", "create", "H"), "NAME"),
    "flavor-create": (("flavor", "create", "H", "--label", "gpu=h100"), "NAME"),
    "submit-name": (
        ("submit", "-q", "default", "-n", "team-b", "--name", "H", "--", "x"),
        "--name",
    ),
    "submit-queue": (("submit", "-q", "H", "-n", "team-b", "--", "x"), "--queue"),
    "submit-namespace": (("submit", "-q", "default", "-n", "H", "--", "x"), "--namespace"),
}


@pytest.mark.parametrize(("command", "field"), list(CREATES.values()), ids=list(CREATES))
def test_a_name_kubernetes_would_refuse_is_refused_naming_the_field(
    cli: Invoke, applied: Path, engine: Engine, command: tuple[str, ...], field: str
) -> None:
    for kind, value in BAD_NAMES.items():
        before = _tables(engine)
        r = cli(*(value if a == "H" else a for a in command))
        no_traceback(r)
        assert r.exit_code == 2, (kind, r.output[:300])
        assert r.output.startswith(f"error: {field}: bad name"), (kind, r.output[:300])
        assert len(r.output) < 500, kind  # the value is quoted bounded, not echoed whole
        assert "\n" not in r.output.rstrip("\n") and "\x1b" not in r.output, kind
        assert _tables(engine) == before, kind


# Values past what Kubernetes or Postgres can hold, and what each command names when it
# refuses them. Before the bounds, --priority 3000000000 was "database error: integer out
# of range" (exit 1), 1e4300 Python's 4300-digit error (exit 1), the --since overflow an
# OverflowError (exit 1), 1e30 GPUs were stored, and apply -f /dev/zero read forever.
NAN_FILE = (
    "flavors: [{name: h100}]\ncluster_queues:\n  - name: nan\n    resources:\n"
    "      - flavor: h100\n        nominal: {nvidia.com/gpu: .nan}\n"
)
ABSURD = {
    "priority-int32": (
        ("submit", "-q", "default", "-n", "team-b", "--priority", "3000000000", "--", "x"),
        "'--priority'",
    ),
    "gpus-1e30": (
        ("submit", "-q", "default", "-n", "team-b", "--gpus", "1e30", "--", "x"),
        "nvidia.com/gpu: quantity out of range",
    ),
    "memory-huge-exponent": (
        ("submit", "-q", "default", "-n", "team-b", "--memory", "1e10000000", "--", "x"),
        "memory: quantity out of range",
    ),
    "max-runtime-overflow": (
        ("submit", "-q", "default", "-n", "team-b", "--max-runtime", "9" * 20 + "d", "--", "x"),
        "--max-runtime: at most",
    ),
    "quota-1e30": (
        ("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=1e30"),
        "nvidia.com/gpu: quantity out of range",
    ),
    "quota-1e4300": (
        ("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=1e4300"),
        "nvidia.com/gpu: quantity out of range",
    ),
    "quota-5000-digits": (
        ("quota", "set", "team-a", "--flavor", "h100", "nvidia.com/gpu=" + "9" * 5000),
        "nvidia.com/gpu: quantity out of range",
    ),
    "cq-nominal-1e30": (
        ("cq", "create", "big", "--nominal", "h100:nvidia.com/gpu=1e30"),
        "nvidia.com/gpu: quantity out of range",
    ),
    "usage-since-overflow": (("usage", "--since", "99999999999999999999d"), "--since: at most"),
    "audit-since-overflow": (("audit", "--since", "99999999999999999999d"), "--since: at most"),
    "apply-dev-zero": (("apply", "-f", "/dev/zero"), "larger than 16777216 bytes"),
    "apply-nan": (("apply", "-f", "NAN_FILE"), "nominal.nvidia.com/gpu: bad quantity"),
}


@pytest.mark.parametrize(("command", "names"), list(ABSURD.values()), ids=list(ABSURD))
def test_an_absurd_value_is_refused_up_front_naming_the_field(
    cli: Invoke,
    applied: Path,
    engine: Engine,
    tmp_path: Path,
    command: tuple[str, ...],
    names: str,
) -> None:
    nan = tmp_path / "nan.yaml"
    nan.write_text(NAN_FILE)
    before = _tables(engine)
    r = cli(*(str(nan) if a == "NAN_FILE" else a for a in command))
    no_traceback(r)
    assert r.exit_code == 2, r.output[-300:]
    assert names in r.output, r.output[-300:]
    assert _tables(engine) == before
