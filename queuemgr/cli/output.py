"""How read commands print: rich tables for people, ``-o json|yaml`` for scripts.

Why it exists: every read command offers the same three formats, and scripts
depend on the machine formats, so they are produced in one place from one
plain document (dicts, lists, strings, ints, bools, None) that the command
builds; the table is only a view of that document.

What must stay true: the JSON and YAML documents follow the schemas in
``docs/cli.md`` (keys are added, never renamed or removed); quantities are in
canonical integer units there (millicores, bytes, counts) and in human units
only in tables; nothing but the document goes to stdout in a machine format
(warnings go to stderr).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
import yaml
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table

from queuemgr.core.resources import format_quantity

F = TypeVar("F", bound=Callable[..., Any])
Doc = Any

FORMATS = ("table", "json", "yaml")


def output_option(f: F) -> F:
    return click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format; json and yaml follow the schemas in docs/cli.md.",
    )(f)


def console() -> Console:
    # Wide and colourless when not a terminal, so piped tables are not cut.
    return Console(soft_wrap=True, width=200 if not sys.stdout.isatty() else None)


def emit(doc: Doc, output: str, table: Callable[[Doc], None]) -> None:
    """Print ``doc`` in ``output`` format; ``table`` renders it for people."""
    if output == "json":
        click.echo(json.dumps(doc, indent=2, sort_keys=False, default=str))
    elif output == "yaml":
        click.echo(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), nl=False)
    else:
        table(doc)


def print_table(
    title: str | None, columns: Sequence[str], rows: Sequence[Sequence[object]]
) -> None:
    t = Table(title=title, show_edge=False, box=None, header_style="bold", pad_edge=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*("" if v is None else markup_escape(printable(str(v))) for v in r))
    out = console()
    with out.capture() as captured:
        out.print(t)
    # rich pads the last column; trailing blanks only get in the way of grep and diff.
    click.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def print_fields(pairs: Sequence[tuple[str, object]]) -> None:
    """A ``Key: value`` block, as ``kubectl describe`` prints."""
    width = max((len(k) for k, _ in pairs), default=0) + 1
    for key, value in pairs:
        click.echo(f"{key + ':':<{width}} {'' if value is None else printable(str(value))}")


def printable(text: str) -> str:
    """``text`` with control characters shown as escapes (``\\n``, ``\\x1b``).

    A name may hold anything a tenant typed: a newline would split a table row, and
    an escape sequence would repaint the admin's terminal.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def vec(v: Mapping[str, int]) -> str:
    """A resource vector in human units: ``nvidia.com/gpu=8, cpu=96``."""
    return ", ".join(f"{r}={format_quantity(r, q)}" for r, q in sorted(v.items())) or "-"


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat()


def age(at: datetime | None, now: datetime | None = None) -> str:
    """``3m``, ``2h``, ``5d``: how long ago, as kubectl prints ages."""
    if at is None:
        return "-"
    seconds = int(((now or datetime.now(UTC)) - at).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "l": [x]}`` -> ``{"a.b": 1, "l[0]": x}``: the paths a diff names."""
    out: dict[str, Any] = {}
    if isinstance(doc, Mapping):
        if not doc and prefix:
            out[prefix] = {}
        for k, v in doc.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(doc, list):
        if not doc and prefix:
            out[prefix] = []
        for i, v in enumerate(doc):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = doc
    return out


def changed_fields(before: Any, after: Any) -> dict[str, dict[str, Any]]:
    """``{path: {"before": x, "after": y}}`` for every leaf that differs."""
    b, a = flatten(before or {}), flatten(after or {})
    return {
        k: {"before": b.get(k), "after": a.get(k)}
        for k in sorted(set(b) | set(a))
        if b.get(k) != a.get(k)
    }


def describe_changes(fields: Mapping[str, Mapping[str, Any]]) -> str:
    return "; ".join(
        f"{k}: {json.dumps(v['before'])} -> {json.dumps(v['after'])}" for k, v in fields.items()
    )
