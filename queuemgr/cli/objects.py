"""``queuemgr flavor ...``: the small admin objects, with the verbs of the queues.

Why it exists: flavors (and cohorts, queuemgr.cli.cohorts) are created, listed and deleted like
queues, through the same audited store writes.

What must stay true: flags are checked before the database is touched (exit 2
naming the flag); deletes refuse objects still in use, naming the users
(exit 1); unknown names suggest the nearest ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import click

from queuemgr.cli.common import database, key_values
from queuemgr.cli.errors import BadInput, CliError, handled, not_found
from queuemgr.cli.flags import SUBDOMAIN, check_name
from queuemgr.cli.output import emit, output_option, print_fields, print_table
from queuemgr.core.model import (
    FlavorAutoscale,
    FlavorName,
    ResourceFlavor,
    Toleration,
)
from queuemgr.core.snapshot import Config
from queuemgr.spec.objects import (
    AUTOSCALE_SYNTAX,
    TOLERATION_SYNTAX,
    autoscale_of_text,
    parse_taints,
    toleration_of_text,
)
from queuemgr.store import admin, codec
from queuemgr.store.audit import os_actor
from queuemgr.store.config_objects import load_config, upsert_flavor


@click.group("flavor")
def flavor() -> None:
    """ResourceFlavors: GPU models or node pools, selected by node labels."""


_TOLERATION = click.option(
    "--toleration",
    "tolerations",
    multiple=True,
    metavar="KEY=VALUE:EFFECT",
    help=(
        "Toleration added to the pods admitted on the flavor (repeatable): "
        f"{TOLERATION_SYNTAX}; KEY alone: operator Exists; no EFFECT: every effect."
    ),
)


def _tolerations(given: tuple[str, ...]) -> tuple[Toleration, ...]:
    return tuple(toleration_of_text(raw, "--toleration") for raw in given)


_AUTOSCALE = click.option(
    "--autoscale",
    metavar=AUTOSCALE_SYNTAX,
    help=(
        "The flavor may grow to MAX_NODES nodes of this allocatable (the autoscaler's node "
        "template): node fit of a ClusterQueue with an admission check may plan on the "
        "nodes not there yet (docs/scheduling.md)."
    ),
)
_AUTOSCALE_LABEL = click.option(
    "--autoscale-label",
    "autoscale_labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="A label of the autoscaler's nodes, beside the flavor's (repeatable; with --autoscale).",
)


def _autoscale(given: str | None, labels: tuple[str, ...]) -> FlavorAutoscale | None:
    if given is None:
        if labels:
            raise BadInput("--autoscale-label: needs --autoscale")
        return None
    return autoscale_of_text(given, key_values(labels, "--autoscale-label"), "--autoscale")


@flavor.command("create")
@click.argument("name")
@click.option(
    "--label", "labels", multiple=True, metavar="KEY=VALUE", help="Node label (repeatable)."
)
@click.option("--taint", "taints", multiple=True, metavar="KEY=VALUE:EFFECT", help="Taint.")
@_TOLERATION
@_AUTOSCALE
@_AUTOSCALE_LABEL
@handled
def flavor_create(
    name: str,
    labels: tuple[str, ...],
    taints: tuple[str, ...],
    tolerations: tuple[str, ...],
    autoscale: str | None,
    autoscale_labels: tuple[str, ...],
) -> None:
    """Create ResourceFlavor NAME."""
    check_name(name, "NAME", SUBDOMAIN)
    raw_taints = []
    for t in taints:
        kv, _, effect = t.partition(":")
        key, _, value = kv.partition("=")
        raw_taints.append({"key": key, "value": value, "effect": effect or "NoSchedule"})
    f = ResourceFlavor(
        name=FlavorName(name),
        node_labels=key_values(labels, "--label"),
        taints=parse_taints(raw_taints, "--taint"),
        tolerations=_tolerations(tolerations),
        autoscale=_autoscale(autoscale, autoscale_labels),
    )
    with database() as db, db.write() as conn:
        if FlavorName(name) in load_config(conn)[0].flavors:
            raise CliError(f"flavor {name!r} already exists")
        upsert_flavor(conn, f, actor=os_actor())
    click.echo(f"resourceflavor {name} created")


@flavor.command("edit")
@click.argument("name")
@_TOLERATION
@click.option("--clear-tolerations", is_flag=True, help="Add no tolerations to the flavor's pods.")
@_AUTOSCALE
@_AUTOSCALE_LABEL
@click.option("--clear-autoscale", is_flag=True, help="No nodes beyond the existing ones.")
@handled
def flavor_edit(
    name: str,
    tolerations: tuple[str, ...],
    clear_tolerations: bool,
    autoscale: str | None,
    autoscale_labels: tuple[str, ...],
    clear_autoscale: bool,
) -> None:
    """Change the tolerations or the autoscale of ResourceFlavor NAME: --toleration
    replaces the tolerations, --autoscale the autoscale."""
    if tolerations and clear_tolerations:
        raise BadInput("--toleration: cannot be combined with --clear-tolerations")
    if autoscale is not None and clear_autoscale:
        raise BadInput("--autoscale: cannot be combined with --clear-autoscale")
    new = _tolerations(tolerations)
    new_autoscale = _autoscale(autoscale, autoscale_labels)
    with database() as db, db.write() as conn:
        flavors = load_config(conn)[0].flavors
        old = flavors.get(FlavorName(name))
        if old is None:
            raise not_found("flavor", name, flavors)
        edited = old
        if tolerations or clear_tolerations:
            edited = replace(edited, tolerations=new)
        if autoscale is not None or clear_autoscale:
            edited = replace(edited, autoscale=new_autoscale)
        changed = edited != old and upsert_flavor(conn, edited, actor=os_actor())
    click.echo(f"resourceflavor {name} {'edited' if changed else 'unchanged'}")


@flavor.command("delete")
@click.argument("name")
@handled
def flavor_delete(name: str) -> None:
    """Delete ResourceFlavor NAME (refused while a ClusterQueue has quota on it)."""
    delete_object("flavor", name, admin.delete_flavor, lambda config: config.flavors)
    click.echo(f"resourceflavor {name} deleted")


def _flavor_docs(config: Config) -> list[dict[str, Any]]:
    return [
        {
            **codec.flavor_json(f),
            "cluster_queues": sorted(
                q.name for q in config.cluster_queues.values() if q.quota(f.name) is not None
            ),
        }
        for _, f in sorted(config.flavors.items())
    ]


@flavor.command("list")
@output_option
@handled
def flavor_list(output: str) -> None:
    """ResourceFlavors and the ClusterQueues with quota on them."""
    with database() as db, db.read() as conn:
        config, _ = load_config(conn)
    emit({"flavors": _flavor_docs(config)}, output, _flavor_table)


def _labels_text(d: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(d["node_labels"].items())) or "-"


def _taints_text(d: dict[str, Any]) -> str:
    return ",".join(f"{t['key']}={t['value']}:{t['effect']}" for t in d["taints"]) or "-"


def toleration_text(t: dict[str, Any]) -> str:
    """A stored toleration as ``--toleration`` spells it (``*``: every taint)."""
    effect = f":{t['effect']}" if t["effect"] else ""
    if t["operator"] == "Equal":
        return f"{t['key']}={t['value']}{effect}"
    return f"{t['key']}{effect}" or "*"


def _tolerations_text(d: dict[str, Any]) -> str:
    return ",".join(toleration_text(t) for t in d["tolerations"]) or "-"


def _autoscale_text(d: dict[str, Any]) -> str:
    """``up to 8 nodes of cpu=96000,nvidia.com/gpu=8 (zone=a)``, or ``-``."""
    a = d.get("autoscale")
    if not a:
        return "-"
    node = a["node"]
    vector = ",".join(f"{k}={v}" for k, v in sorted(node["allocatable"].items()))
    labels = ",".join(f"{k}={v}" for k, v in sorted(node["labels"].items()))
    return f"up to {a['max_nodes']} nodes of {vector}" + (f" ({labels})" if labels else "")


def _flavor_table(doc: dict[str, Any]) -> None:
    rows = [
        (
            d["name"],
            _labels_text(d),
            _taints_text(d),
            _tolerations_text(d),
            ", ".join(d["cluster_queues"]) or "-",
        )
        for d in doc["flavors"]
    ]
    print_table(None, ("NAME", "NODE LABELS", "TAINTS", "TOLERATIONS", "CLUSTERQUEUES"), rows)


@flavor.command("describe")
@click.argument("name")
@output_option
@handled
def flavor_describe(name: str, output: str) -> None:
    """ResourceFlavor NAME."""
    describe_object(
        "flavor", name, output, _flavor_docs, lambda config: config.flavors, _flavor_describe
    )


def _flavor_describe(d: dict[str, Any]) -> None:
    print_fields(
        [
            ("Name", d["name"]),
            ("Node labels", _labels_text(d)),
            ("Taints", _taints_text(d)),
            ("Tolerations", _tolerations_text(d)),
            ("Autoscale", _autoscale_text(d)),
            ("ClusterQueues", ", ".join(d["cluster_queues"]) or "-"),
        ]
    )


def delete_object(
    kind: str,
    name: str,
    delete: Callable[..., bool],
    known: Callable[[Config], Mapping[Any, object]],
) -> None:
    """Delete one object with its audit row; in use or unknown is a clear error."""
    with database() as db, db.write() as conn:
        try:
            deleted = delete(conn, name, actor=os_actor())
        except admin.ObjectInUse as exc:
            raise CliError(str(exc)) from None
        if not deleted:
            raise not_found(kind, name, known(load_config(conn)[0]))


def describe_object(
    kind: str,
    name: str,
    output: str,
    docs_of: Callable[[Config], list[dict[str, Any]]],
    known: Callable[[Config], Mapping[Any, object]],
    table: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Print one object's document (``table`` for the human form, else its fields as
    they are), or fail naming the nearest known names."""
    with database() as db, db.read() as conn:
        config, _ = load_config(conn)
    docs = [d for d in docs_of(config) if d["name"] == name]
    if not docs:
        raise not_found(kind, name, known(config))
    emit(docs[0], output, table or (lambda d: print_fields(list(d.items()))))
