"""``queuemgr apply``: idempotent, one transaction, --dry-run, --prune, bad files exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from tests.integration.cli.conftest import QUEUES, Invoke, no_traceback

pytestmark = pytest.mark.integration


def _audit_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM audit_log")).scalar_one())


def test_apply_creates_and_a_second_apply_is_a_no_op(
    cli: Invoke, queues_file: Path, engine: Engine
) -> None:
    first = cli("apply", "-f", str(queues_file))
    assert first.exit_code == 0, first.output
    assert "created ClusterQueue team-a" in first.output
    assert "created LocalQueue team-a/default" in first.output
    rows = _audit_rows(engine)
    assert rows == 7  # 2 flavors, 1 cohort, 2 cluster queues, 2 local queues
    second = cli("apply", "-f", str(queues_file), "-o", "json")
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["changes"] == []
    assert _audit_rows(engine) == rows
    listed = json.loads(cli("cq", "list", "-o", "json").stdout)
    assert [q["name"] for q in listed["cluster_queues"]] == ["team-a", "team-b"]


def test_dry_run_prints_the_diff_and_writes_nothing(
    cli: Invoke, queues_file: Path, engine: Engine, tmp_path: Path
) -> None:
    assert cli("apply", "-f", str(queues_file)).exit_code == 0
    before = _audit_rows(engine)
    changed = tmp_path / "changed.yaml"
    changed.write_text(QUEUES.replace("nvidia.com/gpu: 16", "nvidia.com/gpu: 32"))
    dry = cli("apply", "-f", str(changed), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would update ClusterQueue team-a" in dry.output
    assert "flavors[0].nominal.nvidia.com/gpu: 16 -> 32" in dry.output
    assert _audit_rows(engine) == before
    shown = json.loads(cli("cq", "describe", "team-a", "-o", "json").stdout)
    assert shown["flavors"][0]["nominal"]["nvidia.com/gpu"] == 16
    real = cli("apply", "-f", str(changed))
    assert real.exit_code == 0 and "updated ClusterQueue team-a" in real.output
    assert _audit_rows(engine) == before + 1


def test_prune_deletes_what_the_file_no_longer_lists(
    cli: Invoke, queues_file: Path, engine: Engine, tmp_path: Path
) -> None:
    assert cli("apply", "-f", str(queues_file)).exit_code == 0
    smaller = tmp_path / "smaller.yaml"
    text = QUEUES.replace("  - name: a100\n    node_labels: {gpu: a100}\n", "")
    smaller.write_text(
        text.replace("  - {namespace: team-b, name: default, cluster_queue: team-b}\n", "")
    )
    kept = cli("apply", "-f", str(smaller))
    assert kept.exit_code == 0 and "deleted" not in kept.output
    assert "--prune" in kept.output  # the note about objects not in the file
    pruned = cli("apply", "-f", str(smaller), "--prune", "-o", "json")
    assert pruned.exit_code == 0, pruned.output
    deleted = {(c["kind"], c["name"]) for c in json.loads(pruned.stdout)["changes"]}
    assert deleted == {("LocalQueue", "team-b/default"), ("ResourceFlavor", "a100")}
    with engine.connect() as conn:
        actions = (
            conn.execute(
                sa.text("SELECT object_name FROM audit_log WHERE action = 'delete' ORDER BY id")
            )
            .scalars()
            .all()
        )
    assert actions == ["team-b/default", "a100"]  # queues go first, then what they referenced


@pytest.mark.parametrize(
    ("text", "path"),
    [
        (
            QUEUES.replace("nominal: {nvidia.com/gpu: 8}", "nominal: {nvidia.com/gpu: 8x}"),
            "cluster_queues[1].resources[0].nominal.nvidia.com/gpu",
        ),
        (
            QUEUES.replace("cohort: research\n    namespaces", "cohort: resarch\n    namespaces"),
            "cluster_queues[0].cohort",
        ),
        (QUEUES + "nodes: []\n", "nodes"),
        ("flavors: [\n", "not valid YAML"),
    ],
)
def test_a_bad_file_exits_2_naming_the_path(
    cli: Invoke, tmp_path: Path, engine: Engine, text: str, path: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = cli("apply", "-f", str(bad))
    assert result.exit_code == 2, result.output
    assert path in result.output and str(bad) in result.output
    no_traceback(result)
    assert _audit_rows(engine) == 0


def test_apply_sets_the_preemption_min_runtime_and_audits_it(
    cli: Invoke, queues_file: Path, engine: Engine, tmp_path: Path
) -> None:
    assert cli("apply", "-f", str(queues_file)).exit_code == 0
    before = _audit_rows(engine)
    protected = tmp_path / "protected.yaml"
    protected.write_text(
        QUEUES.replace(
            "  - name: team-a\n    cohort: research\n",
            "  - name: team-a\n    cohort: research\n"
            "    preemption: {reclaim_within_cohort: Any, min_runtime: 2h}\n",
        )
    )
    r = cli("apply", "-f", str(protected), "-o", "json")
    assert r.exit_code == 0, r.output
    (change,) = json.loads(r.stdout)["changes"]
    assert change["name"] == "team-a"
    assert change["fields"]["preemption_min_runtime"] == {"before": 0, "after": 7200}
    assert _audit_rows(engine) == before + 1
    shown = json.loads(cli("cq", "describe", "team-a", "-o", "json").stdout)
    assert shown["preemption_min_runtime"] == 7200
    assert json.loads(cli("apply", "-f", str(protected), "-o", "json").stdout)["changes"] == []


def test_apply_sets_the_borrowing_max_runtime_and_audits_it(
    cli: Invoke, queues_file: Path, engine: Engine, tmp_path: Path
) -> None:
    assert cli("apply", "-f", str(queues_file)).exit_code == 0
    before = _audit_rows(engine)
    limited = tmp_path / "limited.yaml"
    limited.write_text(
        QUEUES.replace(
            "  - name: team-a\n    cohort: research\n",
            "  - name: team-a\n    cohort: research\n    borrowing_max_runtime: 12h\n",
        )
    )
    r = cli("apply", "-f", str(limited), "-o", "json")
    assert r.exit_code == 0, r.output
    (change,) = json.loads(r.stdout)["changes"]
    assert change["fields"]["borrowing_max_runtime"] == {"before": None, "after": 43200}
    assert _audit_rows(engine) == before + 1
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        limited.read_text().replace("borrowing_max_runtime: 12h", "borrowing_max_runtime: 0")
    )
    r = cli("apply", "-f", str(bad))
    assert r.exit_code == 2 and "borrowing_max_runtime" in r.output, r.output
