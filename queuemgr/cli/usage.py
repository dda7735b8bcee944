"""``queuemgr usage [--since 7d] [--by cq|lq|namespace]``: who used the GPUs, and who borrowed.

Why it exists: quota arguments are settled with numbers. GPU-hours come from
the service's ``usage_samples`` (each sample times the seconds it stands
for), borrowed GPU-hours from what a ClusterQueue held beyond its nominal
quota, and the decayed fair-share usage from ``local_queue_usage``, which is
what ``ordering: usage`` compares.

What must stay true: the JSON document follows the ``usage`` schema of
docs/cli.md; ``borrowed_gpu_hours`` is null where borrowing is not defined
(LocalQueues and namespaces); an empty store prints an empty table, not an error.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import click

from queuemgr.cli.common import database
from queuemgr.cli.errors import handled
from queuemgr.cli.output import emit, output_option, print_table
from queuemgr.spec.knobs import parse_duration
from queuemgr.store.usage import usage_report


@click.command("usage")
@click.option("--since", default="7d", show_default=True, help="Window: 90m, 12h, 7d, 2w.")
@click.option(
    "--by",
    type=click.Choice(["cq", "lq", "namespace"]),
    default="cq",
    show_default=True,
    help="Group by ClusterQueue, LocalQueue or namespace (tenant).",
)
@output_option
@handled
def usage(since: str, by: str, output: str) -> None:
    """GPU-hours, borrowed GPU-hours and decayed fair-share usage per queue or tenant."""
    after = datetime.now(UTC) - timedelta(seconds=parse_duration(since, "--since"))
    with database() as db, db.read() as conn:
        lines = usage_report(conn, since=after, by=by)
    doc = {
        "since": after.isoformat(),
        "by": by,
        "rows": [
            {
                "name": line.name,
                "gpu_hours": round(line.gpu_hours, 4),
                "borrowed_gpu_hours": (
                    None if line.borrowed_gpu_hours is None else round(line.borrowed_gpu_hours, 4)
                ),
                "decayed_usage": round(line.decayed, 4),
            }
            for line in lines
        ],
    }
    emit(doc, output, _table)


def _table(doc: dict[str, Any]) -> None:
    title = {"cq": "CLUSTERQUEUE", "lq": "LOCALQUEUE", "namespace": "NAMESPACE"}[doc["by"]]
    rows = [
        (
            r["name"],
            f"{r['gpu_hours']:.2f}",
            "-" if r["borrowed_gpu_hours"] is None else f"{r['borrowed_gpu_hours']:.2f}",
            f"{r['decayed_usage']:.2f}",
        )
        for r in doc["rows"]
    ]
    print_table(None, (title, "GPU-HOURS", "BORROWED GPU-HOURS", "DECAYED USAGE (GPUs)"), rows)
