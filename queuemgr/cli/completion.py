"""Shell completion: ``queuemgr completion bash|zsh|fish`` and names completed from the store.

Why it exists: people type workload and queue names all day. Click generates
the completion scripts; this module prints them and completes the names of
workloads (``why``, ``status``, ``cancel``) and LocalQueues (``-q``) from the
database the command would use.

What must stay true: completing never prints an error or a traceback and
never writes; when the database cannot be reached, it completes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import click
from click.shell_completion import get_completion_class

from queuemgr.cli.common import database, default_namespace
from queuemgr.cli.errors import BadInput, handled
from queuemgr.store import readouts
from queuemgr.store.handle import Tx

SHELLS = ("bash", "zsh", "fish")


def _namespace(ctx: click.Context) -> str:
    return default_namespace(ctx.params.get("namespace"))


def _names(query: Callable[[Tx], list[str]]) -> list[str]:
    try:  # any failure (no database, no schema) completes nothing
        with database() as db, db.read() as conn:
            return query(conn)
    except Exception:
        return []


def complete_workload(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    ns = _namespace(ctx)
    return _names(lambda conn: readouts.workload_names(conn, ns, incomplete))


def complete_local_queue(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    ns = _namespace(ctx)
    return _names(lambda conn: readouts.local_queue_names(conn, ns, incomplete))


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
