"""The ``queuemgr`` command line: a click group whose commands live in their modules.

Why it exists: one entry point for people and scripts. Each command's module is
imported when it runs, so a quick ``why`` does not load the simulator, the
service or the Kubernetes client.

What must stay true: no traceback ever reaches the user. Bad input (usage,
scenario, trace) exits 2 with a message on stderr that names the file and the
YAML path or line; a failure (an invariant violation, an internal error)
exits 1. Machine-readable output (``-`` for events or summary) goes to stdout
and nothing else is mixed into it.
"""

from __future__ import annotations

import importlib

import click

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2


# Each command's module, imported when the command runs (or help lists it): a
# user's `why` or `list` should not wait for the service, the demo or the
# Kubernetes client to be imported, which took about a second together.
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "db": ("queuemgr.cli.db", "db"),
    "serve": ("queuemgr.cli.serve", "serve"),
    "completion": ("queuemgr.cli.completion", "completion"),
    "demo": ("queuemgr.cli.demo", "demo"),
    "apply": ("queuemgr.cli.apply", "apply"),
    "cq": ("queuemgr.cli.queues", "cq"),
    "lq": ("queuemgr.cli.queues", "lq"),
    "cohort": ("queuemgr.cli.cohorts", "cohort"),
    "flavor": ("queuemgr.cli.objects", "flavor"),
    "quota": ("queuemgr.cli.quota", "quota"),
    "queues": ("queuemgr.cli.queues", "queues"),
    "usage": ("queuemgr.cli.usage", "usage"),
    "audit": ("queuemgr.cli.audit", "audit"),
    "grant": ("queuemgr.cli.grants", "grant"),
    "revoke": ("queuemgr.cli.grants", "revoke"),
    "grants": ("queuemgr.cli.grants", "grants"),
    "submit": ("queuemgr.cli.workloads", "submit"),
    "list": ("queuemgr.cli.workloads", "list_"),
    "status": ("queuemgr.cli.workloads", "status"),
    "why": ("queuemgr.cli.workloads", "why"),
    "cancel": ("queuemgr.cli.workloads", "cancel"),
    "simulate": ("queuemgr.cli.simulate", "simulate"),
}


class LazyGroup(click.Group):
    """A group whose commands are imported on use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = LAZY_COMMANDS.get(cmd_name)
        if found is None:
            return super().get_command(ctx, cmd_name)
        module, attr = found
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command) and command.name == cmd_name
        return command


@click.group(cls=LazyGroup)
def main() -> None:
    """queuemgr: a queue-based, fair-share GPU quota manager."""
