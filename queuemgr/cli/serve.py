"""``queuemgr serve``: run the admission service until SIGINT or SIGTERM.

Why it exists: the command line only parses ``--config`` and reports; the
service is built by :class:`queuemgr.service.app.Service`, the composition root.

What must stay true: a bad configuration value (file key or ``QUEUEMGR_*``
variable) exits 2 naming it; an unusable database or cluster file exits 1
(2 for a bad cluster file); never a traceback. SIGTERM stops cleanly and
releases the leader's lease so a standby takes over at once.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from types import FrameType

import click

from queuemgr.controller.simulated import load_cluster_file
from queuemgr.service.app import Service
from queuemgr.service.settings import load_config
from queuemgr.spec.checks import InputError
from queuemgr.store.database import DatabaseError

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Service configuration YAML (see docs/operations.md).",
)
def serve(config_path: Path | None) -> None:
    """Run the scheduler service: loop, leader election, /metrics, /healthz, /readyz."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = load_config(config_path)
    except InputError as exc:
        click.echo(f"error: config: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    try:
        if config.cluster_file is not None:
            load_cluster_file(config.cluster_file)  # a bad file is refused before any connection
        service = Service(config)
    except InputError as exc:
        click.echo(f"error: cluster_file: {config.cluster_file}: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except (DatabaseError, OSError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_FAILURE)

    def _stop(signum: int, frame: FrameType | None) -> None:
        service.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    service.start()
    service.wait()
