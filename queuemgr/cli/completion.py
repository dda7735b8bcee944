"""Shell completion: ``queuemgr completion bash|zsh|fish`` and names completed from the store.

Why it exists: people type workload and queue names all day. Click generates
the completion scripts; this module prints them and completes the names of
workloads (``why``, ``status``, ``cancel``) and LocalQueues (``-q``) from the
database the command would use.

What must stay true: completing never prints an error or a traceback and
never writes; when the database cannot be reached, it completes nothing.
"""

from __future__ import annotations

from typing import Any

import click
import sqlalchemy as sa
from click.shell_completion import get_completion_class

from queuemgr.cli.common import default_namespace, engine
from queuemgr.cli.errors import BadInput, handled

SHELLS = ("bash", "zsh", "fish")


def _namespace(ctx: click.Context) -> str:
    return default_namespace(ctx.params.get("namespace"))


def _names(query: str, params: dict[str, Any]) -> list[str]:
    try:  # any failure (no database, no schema) completes nothing
        with engine() as eng, eng.connect() as conn:
            return [str(r[0]) for r in conn.execute(sa.text(query), params)]
    except Exception:
        return []


def complete_workload(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return _names(
        "SELECT name FROM workloads WHERE namespace = :ns AND starts_with(name, :prefix) "
        "AND state <> 'Finished' ORDER BY name LIMIT 200",
        {"ns": _namespace(ctx), "prefix": incomplete},
    )


def complete_local_queue(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return _names(
        "SELECT name FROM local_queues WHERE namespace = :ns AND starts_with(name, :prefix) "
        "ORDER BY name",
        {"ns": _namespace(ctx), "prefix": incomplete},
    )


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS), metavar="SHELL")
@handled
def completion(shell: str) -> None:
    """Print the completion script for SHELL; e.g. `eval "$(queuemgr completion bash)"`."""
    cls = get_completion_class(shell)
    if cls is None:  # click knows all three; an older click might not
        raise BadInput(f"SHELL: completion for {shell!r} is not available")
    root = click.get_current_context().find_root()
    assert root.command is not None
    script = cls(root.command, {}, "queuemgr", "_QUEUEMGR_COMPLETE").source()
    click.echo(script)
