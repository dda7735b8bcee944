"""``--watch`` for read commands: print the document again whenever it changes.

Why it exists: a tenant waiting for a job wants ``kubectl get -w``, not a
shell loop around ``queuemgr status``. The command's own fetch builds the
same document as without ``--watch``; this module polls it and prints each
new version: the table again (with a time stamp) for people, one JSON
document per line (or one YAML document per ``---``) for scripts.

What must stay true: a version is printed only when the document differs
from the last one printed; Ctrl-C ends the watch with exit 0; ``status
--watch`` also ends once the workload has finished, and ``--watch-timeout``
ends any watch after that long.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
import yaml

from queuemgr.cli.output import Doc
from queuemgr.spec.knobs import parse_duration

F = TypeVar("F", bound=Callable[..., Any])


def watch_options(f: F) -> F:
    f = click.option(
        "--watch-timeout",
        default=None,
        metavar="DURATION",
        help="With --watch: stop after this long (30s, 10m, 2h).",
    )(f)
    f = click.option(
        "--interval",
        type=click.FloatRange(min=0.1),
        default=2.0,
        show_default=True,
        help="With --watch: seconds between polls.",
    )(f)
    return click.option(
        "-w", "--watch", is_flag=True, help="Keep printing the answer as it changes (Ctrl-C ends)."
    )(f)


def watch(
    fetch: Callable[[], Doc],
    output: str,
    table: Callable[[Doc], None],
    *,
    interval: float,
    timeout: str | None,
    done: Callable[[Doc], bool] = lambda _doc: False,
) -> None:
    """Poll ``fetch`` and print each changed document until ``done``, the timeout or Ctrl-C."""
    limit = None if timeout is None else parse_duration(timeout, "--watch-timeout")
    deadline = None if limit is None else time.monotonic() + limit
    last: Doc = None
    try:
        while True:
            doc = fetch()
            if doc != last:
                _print(doc, output, table, first=last is None)
                last = doc
            if done(doc) or (deadline is not None and time.monotonic() >= deadline):
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def _print(doc: Doc, output: str, table: Callable[[Doc], None], *, first: bool) -> None:
    if output == "json":
        click.echo(json.dumps(doc, default=str))
    elif output == "yaml":
        click.echo("---")
        click.echo(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), nl=False)
    else:
        if not first:
            click.echo("")
        click.echo(f"# {datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC")
        table(doc)
